"""The schema engine: turns the declarative descriptions in messages.py into per-version
decode and encode functions over _codec's Reader/Writer.

Description format (ours): ``F(name, type, versions, nullable=, tag=, tagged=, default=,
fields=)``, ``default=NULL`` for the spec's explicit null. ``type`` is a primitive (int8
int16 int32 int64 uint16 float64 bool uuid string bytes records), ``[]X`` for an array of
primitive X or of struct X (then ``fields`` gives X's fields), or a struct name with
``fields`` for a single nested struct. Version strings
are "N+", "N-M" or "N". A Message adds the api key, the served version range and the first
flexible version (compact strings/arrays/bytes and a tag buffer after every struct).

For each (message, version) we generate Python source once (lazily, cached) with one
function per struct and exec it: no per-field dict lookups or interpretation at run time.
Decoded structs are instances of one generated ``__slots__`` class per struct name, with
Kafka's snake_case field names; fields absent from a version hold the spec default.
Encoders accept those objects, any object with the attributes (e.g. kafka-python's), or
plain dicts; a missing field is written as the spec default. Tagged fields are written
only when they differ from their default (old librdkafka mis-parses default-valued tags),
so the usual tag buffer is the single byte 0.

Records fields decode to a zero-copy memoryview of the frame. On encode a records value
may be None (null), bytes/bytearray (copied), a memoryview or FileRegion (appended with
Writer.external, never copied), a list of those, or a ``(parts, total_length)`` tuple.

Generated functions are pure and hold no state: callable from any thread.
"""

from fastlog._codec import FileRegion, Reader, Writer

from .errors import ProtocolError

_PRIMITIVES = ("int8", "int16", "int32", "int64", "uint16", "float64", "bool", "uuid",
               "string", "bytes", "records")

# Reader/Writer method per (type, flexible, nullable).
_STR = {(False, False): "string", (False, True): "nullable_string",
        (True, False): "compact_string", (True, True): "compact_nullable_string"}
_BYTES = {(False, False): "bytes_", (False, True): "nullable_bytes",
          (True, False): "compact_bytes", (True, True): "compact_nullable_bytes"}
_FIXED = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
          "uint16": "uint16", "float64": "float64", "bool": "boolean", "uuid": "uuid"}
_ZERO = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0,
         "bool": False, "string": "", "bytes": b"", "records": None}
ZERO_UUID = bytes(16)  # _codec reads and writes uuids as their 16 raw bytes


class _Null:
    """F(default=NULL): the spec's explicit null default, told apart from no default."""

    def __repr__(self):
        return "NULL"


NULL = _Null()


def parse_versions(text):
    """'3+' -> (3, None); '0-12' -> (0, 12); '2' -> (2, 2)."""
    if text is None:
        return None
    if text.endswith("+"):
        return int(text[:-1]), None
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def _in(rng, version):
    return rng is not None and rng[0] <= version and (rng[1] is None or version <= rng[1])


class F:
    """One field of a struct, as described in messages.py."""

    __slots__ = ("name", "type", "versions", "nullable", "tag", "tagged", "default",
                 "fields", "is_array", "elem")

    def __init__(self, name, type, versions, *, nullable=None, tag=None, tagged=None,
                 default=None, fields=None):
        self.name = name
        self.type = type
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        self.tagged = parse_versions(tagged)
        self.fields = fields
        self.is_array = type.startswith("[]")
        self.elem = type[2:] if self.is_array else type
        if fields is None and self.elem not in _PRIMITIVES:
            raise ValueError(f"field {name}: unknown type {type!r}")
        self.default = self._resolve_default(default)

    def _resolve_default(self, default):
        if default is NULL:
            return None  # the spec's "default": "null" (e.g. group_instance_id)
        if self.is_array or self.fields is not None:
            return None if default is None and self.nullable is not None else default
        if default is not None:
            return default
        if self.type == "string" and self.nullable is not None and self.versions is not None:
            # Kafka's default for a nullable string without an explicit default is "".
            return ""
        if self.type == "uuid":
            return ZERO_UUID
        return _ZERO[self.type]


class Message:
    """One request or response of one API, over the versions fastlog serves."""

    def __init__(self, api_key, kind, name, *, valid, flexible, fields):
        self.api_key = api_key
        self.kind = kind
        self.name = name
        self.valid = valid
        self.flexible = flexible
        self.fields = fields
        self.root = name + kind.capitalize()
        if kind == "response":
            # An omitted records field is written empty, not null: Kafka sends empty
            # record sets, and kafka-python's consumer fails on a null one.
            _set_records_default(fields, b"")
        self.classes = {}
        _build_classes(self.root, fields, self.classes)
        self._decoders = {}
        self._encoders = {}

    def is_flexible(self, version):
        return self.flexible is not None and version >= self.flexible

    def new(self, **fields):
        """A root object with spec defaults, e.g. a response a handler then fills in."""
        return self.classes[self.root](**fields)

    def decoder(self, version):
        fn = self._decoders.get(version)
        if fn is None:
            self._check_version(version)
            fn = self._decoders[version] = _compile(self, version, "decode")
        return fn

    def encoder(self, version):
        fn = self._encoders.get(version)
        if fn is None:
            self._check_version(version)
            fn = self._encoders[version] = _compile(self, version, "encode")
        return fn

    def _check_version(self, version):
        if not self.valid[0] <= version <= self.valid[1]:
            raise ValueError(f"{self.root} v{version} is not described "
                             f"(served {self.valid[0]}-{self.valid[1]})")


def _set_records_default(fields, value):
    for f in fields:
        if f.type == "records":
            f.default = value
        elif f.fields is not None:
            _set_records_default(f.fields, value)


# --- struct classes ---------------------------------------------------------------------

class Struct:
    """Base of the generated struct classes: equality, repr and dict conversion."""

    __slots__ = ()

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __repr__(self):
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{self.__class__.__name__}({inner})"

    def to_dict(self):
        out = {}
        for n in self.__slots__:
            v = getattr(self, n)
            if isinstance(v, Struct):
                v = v.to_dict()
            elif isinstance(v, list) and v and isinstance(v[0], Struct):
                v = [e.to_dict() for e in v]
            out[n] = v
        return out

    __hash__ = None


_EMPTY_LIST = object()  # stands for "a fresh []" in generated __init__ defaults


def _build_classes(name, fields, classes):
    for f in fields:
        if f.fields is not None:
            _build_classes(f.elem, f.fields, classes)
    ns = {"_E": _EMPTY_LIST}
    params, body = [], []
    for i, f in enumerate(fields):
        if (f.is_array or f.fields is not None) and f.default is None and f.nullable is None:
            d = _EMPTY_LIST if f.is_array else None
        else:
            d = f.default
        ns[f"d{i}"] = d
        params.append(f"{f.name}=d{i}")
        if d is _EMPTY_LIST:
            body.append(f"    self.{f.name} = [] if {f.name} is _E else {f.name}")
        else:
            body.append(f"    self.{f.name} = {f.name}")
    src = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass")
    exec(src, ns)  # noqa: S102 - source built here from the static descriptions
    cls = type(name, (Struct,), {"__slots__": tuple(f.name for f in fields),
                                 "__init__": ns["__init__"], "__module__": __name__})
    cls.__init__.__qualname__ = f"{name}.__init__"
    classes[name] = cls


# --- code generation ------------------------------------------------------------------


def _compile(msg, version, direction):
    flex = msg.is_flexible(version)
    ns = {"ProtocolError": ProtocolError, "Writer": Writer, "Reader": Reader,
          "put_records": put_records}
    out = []
    gen = _gen_decode if direction == "decode" else _gen_encode
    gen(msg, msg.root, msg.fields, version, flex, ns, out)
    src = "\n".join(out) + "\n"
    code = compile(src, f"<fastlog.protocol {msg.root} v{version} {direction}>", "exec")
    exec(code, ns)  # noqa: S102 - source generated above from the static descriptions
    fn = ns[("d_" if direction == "decode" else "e_") + msg.root]
    fn.source = src
    return fn


def _read_expr(f, flex, nullable, ftype):
    if ftype in _FIXED:
        return f"r.{_FIXED[ftype]}()"
    if ftype == "string":
        return f"r.{_STR[flex, nullable]}()"
    if ftype == "bytes":
        return f"r.{_BYTES[flex, nullable]}()"
    if ftype == "records":
        if flex:
            if not nullable:
                raise ValueError(f"{f.name}: non-nullable flexible records not supported")
            return "r.compact_nullable_bytes_view()"
        return "r.nullable_bytes_view()" if nullable else "r.bytes_view()"
    raise ValueError(ftype)


def _default_expr(f, ns):
    key = f"D_{id(f)}"
    if f.is_array and f.default is None and f.nullable is None:
        return "[]"
    ns[key] = f.default
    return key


def _gen_decode(msg, sname, fields, version, flex, ns, out):
    lines = [f"def d_{sname}(r):"]
    args, tagged = [], []
    for f in fields:
        if not _in(f.versions, version):
            args.append(_default_expr(f, ns))
            continue
        var = f"v_{f.name}"
        args.append(var)
        if flex and _in(f.tagged, version):
            tagged.append(f)
            lines.append(f"    {var} = {_default_expr(f, ns)}")
            continue
        lines.extend(_decode_field(msg, f, var, version, flex, ns, out, "    "))
    if flex:
        if tagged:
            lines.append("    for _ in range(r.uvarint()):")
            lines.append("        tg = r.uvarint()")
            lines.append("        sz = r.uvarint()")
            lines.append("        end = r.pos + sz")
            kw = "if"
            for f in sorted(tagged, key=lambda f: f.tag):
                lines.append(f"        {kw} tg == {f.tag}:")
                lines.extend(_decode_field(msg, f, f"v_{f.name}", version, flex, ns, out,
                                           "            "))
                lines.append("            if r.pos != end:")
                lines.append(f"                raise ProtocolError('tagged field {f.name}: "
                             "size does not match its content')")
                kw = "elif"
            lines.append("        else:")
            lines.append("            r.skip(sz)")
        else:
            lines.append("    r.tagged_fields()")
    lines.append(f"    return C_{sname}({', '.join(args)})")
    ns[f"C_{sname}"] = msg.classes[sname]
    out.append("\n".join(lines))
    out.append("")


def _decode_field(msg, f, var, version, flex, ns, out, ind):
    nullable = _in(f.nullable, version)
    if not f.is_array:
        if f.fields is not None:
            if nullable:
                raise ValueError(f"{f.name}: nullable structs not supported")
            _gen_decode(msg, f.elem, f.fields, version, flex, ns, out)
            return [f"{ind}{var} = d_{f.elem}(r)"]
        return [f"{ind}{var} = {_read_expr(f, flex, nullable, f.type)}"]
    n = f"n_{f.name}"
    lines = [f"{ind}{n} = r.{'compact_array_len' if flex else 'array_len'}()",
             f"{ind}if {n} < 0:"]
    if nullable:
        lines.append(f"{ind}    {var} = None")
    else:
        lines.append(f"{ind}    raise ProtocolError('array {f.name} is null')")
    if f.fields is not None:
        _gen_decode(msg, f.elem, f.fields, version, flex, ns, out)
        elem = f"d_{f.elem}(r)"
    else:
        elem = _read_expr(f, flex, False, f.elem)
    # An explicit loop, not a list comprehension: in 3.11 a comprehension is a nested
    # function call, which costs more than the usual 1-3 elements it builds here.
    lines.append(f"{ind}else:")
    lines.append(f"{ind}    {var} = []")
    lines.append(f"{ind}    for _ in range({n}):")
    lines.append(f"{ind}        {var}.append({elem})")
    return lines


def _gen_encode(msg, sname, fields, version, flex, ns, out):
    present = [f for f in fields if _in(f.versions, version)]
    lines = [f"def e_{sname}(w, o):"]
    if present:
        keys = []
        for f in present:
            ns_key = f"D_{id(f)}"
            if f.is_array and f.default is None and f.nullable is None:
                ns[ns_key] = ()
            else:
                ns[ns_key] = f.default
            keys.append((f, ns_key))
        lines.append("    if o.__class__ is dict:")
        lines.extend(f"        v_{f.name} = o.get({f.name!r}, {k})" for f, k in keys)
        lines.append("    else:")
        lines.extend(f"        v_{f.name} = getattr(o, {f.name!r}, {k})" for f, k in keys)
    tagged = []
    for f in present:
        if flex and _in(f.tagged, version):
            tagged.append(f)
            continue
        lines.extend(_encode_field(msg, f, f"v_{f.name}", version, flex, ns, out, "    ", "w"))
    if flex:
        if tagged:
            lines.append("    tags = {}")
            for f in sorted(tagged, key=lambda f: f.tag):
                var = f"v_{f.name}"
                if f.is_array or f.fields is not None:
                    cond = f"{var}"
                else:
                    cond = f"{var} != D_{id(f)}"
                lines.append(f"    if {cond}:")
                lines.append("        tw = Writer()")
                lines.extend(_encode_field(msg, f, var, version, flex, ns, out, "        ",
                                           "tw"))
                lines.append(f"        tags[{f.tag}] = tw.getvalue()")
            lines.append("    w.tagged_fields(tags or None)")
        else:
            lines.append("    w.uvarint(0)")
    if len(lines) == 1:
        lines.append("    pass")
    out.append("\n".join(lines))
    out.append("")


def _write_stmt(f, flex, nullable, ftype, var, w):
    if ftype in _FIXED:
        return f"{w}.{_FIXED[ftype]}({var})"
    if ftype == "string":
        return f"{w}.{_STR[flex, nullable]}({var})"
    if ftype == "bytes":
        return f"{w}.{_BYTES[flex, nullable]}({var})"
    if ftype == "records":
        return f"put_records({w}, {var}, {flex})"
    raise ValueError(ftype)


def _encode_field(msg, f, var, version, flex, ns, out, ind, w):
    nullable = _in(f.nullable, version)
    if not f.is_array:
        if f.fields is not None:
            _gen_encode(msg, f.elem, f.fields, version, flex, ns, out)
            return [f"{ind}e_{f.elem}({w}, {var})"]
        return [f"{ind}{_write_stmt(f, flex, nullable, f.type, var, w)}"]
    alen = "compact_array_len" if flex else "array_len"
    lines = [f"{ind}if {var} is None:",
             f"{ind}    {w}.{alen}({-1 if nullable else 0})",
             f"{ind}else:",
             f"{ind}    {w}.{alen}(len({var}))",
             f"{ind}    for e in {var}:"]
    if f.fields is not None:
        _gen_encode(msg, f.elem, f.fields, version, flex, ns, out)
        lines.append(f"{ind}        e_{f.elem}({w}, e)")
    else:
        lines.append(f"{ind}        {_write_stmt(f, flex, False, f.elem, 'e', w)}")
    return lines


# --- records values -------------------------------------------------------------------


def _part_len(part):
    if type(part) is FileRegion:
        return part.length
    if type(part) is memoryview:
        return part.nbytes
    return len(part)


def put_records(w, value, flexible):
    """Write a records field: length prefix, then the bytes; FileRegions and memoryviews
    are appended uncopied as their own parts, bytes are copied into the buffer."""
    t = type(value)
    if t is FileRegion:  # the usual Fetch case: one region per partition
        n = value.length
        if flexible:
            w.uvarint(n + 1)
        else:
            w.int32(n)
        w.external(value, n)
        return
    if value is None:
        if flexible:
            w.uvarint(0)
        else:
            w.int32(-1)
        return
    if t is bytes or t is bytearray:
        if flexible:
            w.compact_nullable_bytes(value)
        else:
            w.nullable_bytes(value)
        return
    if t is tuple:
        parts, total = value
    elif t is list:
        parts, total = value, sum(_part_len(p) for p in value)
    else:
        parts, total = (value,), _part_len(value)
    if flexible:
        w.uvarint(total + 1)
    else:
        w.int32(total)
    for part in parts:
        pt = type(part)
        if pt is FileRegion:
            w.external(part, part.length)
        elif pt is memoryview:
            w.external(part, part.nbytes)
        else:
            w.write(part)
