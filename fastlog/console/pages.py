# fastlog/console/pages.py: the web console's HTML: escaping, the page layout, tables,
# forms, and how a record's key and value are shown.
#
# Everything a page shows from the cluster (topic and group names, keys, values, headers,
# principals, error messages) is untrusted: it passes through esc() (HTML-escaped, quotes
# included) or show_bytes() before it reaches a page, and attribute values are quoted. The
# pages carry no inline script or style (the app's Content-Security-Policy forbids them);
# the script reads what it needs from data- attributes. Pure functions, any thread.

from __future__ import annotations

import base64
import binascii
import html
import json
import urllib.parse

STATIC = "/static"
UPLOT = f"{STATIC}/vendor/uplot-1.6.32"
# A value longer than this is cut on the messages page, with a link to show it all.
PREVIEW_BYTES = 1024
# The most of one value the "show all" page renders.
FULL_VALUE_BYTES = 1 << 20
FORMATS = ("auto", "text", "json", "hex", "base64")

NAV = (("/", "Overview"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
       ("/charts", "Charts"), ("/acls", "ACLs"), ("/users", "SCRAM users"))


def esc(value) -> str:
    """HTML-escaped text of any value (None shows as '-')."""
    return "-" if value is None else html.escape(str(value), quote=True)


def url(path: str, **query) -> str:
    """path with its query string; None values are left out. Escape it where it is put."""
    q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
    return f"{path}?{q}" if q else path


def link(path: str, text, **query) -> str:
    return f'<a href="{esc(url(path, **query))}">{esc(text)}</a>'


def layout(title: str, body: str, *, cluster: str, read_only: bool,
           notice: str | None = None, error: str | None = None, scripts=()) -> str:
    nav = "".join(f'<a href="{p}">{esc(t)}</a>' for p, t in NAV)
    mode = '<span class="badge">read-only</span>' if read_only else ""
    flash = ""
    if notice:
        flash += f'<p class="notice" role="status">{esc(notice)}</p>'
    if error:
        flash += f'<p class="error" role="alert">{esc(error)}</p>'
    tags = "".join(f'<script src="{esc(s)}"></script>' for s in scripts)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} - fastlog console</title>"
        f'<link rel=stylesheet href="{STATIC}/console.css">'
        f'<link rel=stylesheet href="{UPLOT}/uPlot.min.css">'
        f"</head><body><header><strong>fastlog console</strong> "
        f'<span class="cluster">{esc(cluster)}</span> {mode}<nav>{nav}</nav></header>'
        f"<main><h1>{esc(title)}</h1>{flash}{body}</main>"
        f'<script src="{STATIC}/console.js"></script>{tags}</body></html>')


def table(headers, rows, *, cls: str = "", empty: str = "None.") -> str:
    """rows of already-rendered cells (use esc() on untrusted text)."""
    if not rows:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def form(action: str, fields: str, submit: str, *, csrf: str, read_only: bool,
         cls: str = "", confirm: str | None = None) -> str:
    """A POST form carrying the CSRF token; in read-only mode a note instead."""
    if read_only:
        return ""
    extra = f' data-confirm="{esc(confirm)}"' if confirm else ""
    return (f'<form method=post action="{esc(action)}" class="{esc(cls)}"{extra}>'
            f'<input type=hidden name=csrf value="{esc(csrf)}">{fields}'
            f"<button type=submit>{esc(submit)}</button></form>")


def hidden(name: str, value) -> str:
    return f'<input type=hidden name="{esc(name)}" value="{esc(value)}">'


def field(label: str, name: str, value="", *, kind: str = "text", placeholder: str = "",
          required: bool = False, size: int | None = None) -> str:
    req = " required" if required else ""
    sz = f" size={size}" if size else ""
    return (f'<label>{esc(label)} <input type={kind} name="{esc(name)}" value="{esc(value)}"'
            f' placeholder="{esc(placeholder)}"{req}{sz}></label>')


def select(label: str, name: str, options, selected=None) -> str:
    """options: [(value, text)] or [value]."""
    opts = []
    for o in options:
        value, text = o if isinstance(o, tuple) else (o, o)
        sel = " selected" if str(value) == str(selected) else ""
        opts.append(f'<option value="{esc(value)}"{sel}>{esc(text)}</option>')
    return f'<label>{esc(label)} <select name="{esc(name)}">{"".join(opts)}</select></label>'


def textarea(label: str, name: str, value="", *, rows: int = 3, placeholder: str = "") -> str:
    return (f'<label>{esc(label)} <textarea name="{esc(name)}" rows={rows} '
            f'placeholder="{esc(placeholder)}">{esc(value)}</textarea></label>')


# -- record bytes ------------------------------------------------------------------------

def detect_format(data: bytes) -> str:
    """json for UTF-8 text that parses as a JSON object or array, text for other UTF-8
    without control characters (but tab and newlines), hex otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex"
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and _json_or_none(stripped) is not None:
        return "json"
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return "hex"
    return "text"


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def render_bytes(data: bytes | None, fmt: str = "auto") -> tuple[str, str]:
    """(format used, text) of a key or value; a format that does not fit the bytes (JSON
    that does not parse, text that is not UTF-8) falls back to the detected one."""
    if data is None:
        return "null", ""
    data = bytes(data)
    if fmt not in FORMATS or fmt == "auto":
        fmt = detect_format(data)
    if fmt == "json":
        value = _json_or_none(data.decode("utf-8", "replace"))
        if value is None:
            return render_bytes(data, "auto" if detect_format(data) != "json" else "hex")
        return "json", json.dumps(value, indent=2, ensure_ascii=False)
    if fmt == "text":
        return "text", data.decode("utf-8", "replace")
    if fmt == "base64":
        return "base64", base64.b64encode(data).decode("ascii")
    return "hex", binascii.hexlify(data, " ", -2).decode("ascii") if data else ""


def show_bytes(data: bytes | None, fmt: str = "auto", *, limit: int | None = PREVIEW_BYTES,
               more_href: str | None = None) -> str:
    """A key or value as escaped HTML: <pre> with its format, cut at limit bytes with a
    "show all" link to more_href."""
    if data is None:
        return '<span class="null">null</span>'
    data = bytes(data)
    cut = limit is not None and len(data) > limit
    used, text = render_bytes(data[:limit] if cut else data, fmt)
    if cut and used == "json":
        used, text = render_bytes(data[:limit], "text")
    out = f'<pre class="value fmt-{esc(used)}" title="{esc(used)}, {len(data)} bytes">{esc(text)}</pre>'
    if cut:
        more = f' <a href="{esc(more_href)}">show all</a>' if more_href else ""
        out += f'<span class="cut">{esc(len(data) - limit)} more bytes{more}</span>'
    return out


def show_headers(headers) -> str:
    if not headers:
        return ""
    items = []
    for k, v in headers:
        _, text = render_bytes(v, "auto")
        items.append(f"<li><b>{esc(k)}</b>: {esc(text[:256])}</li>")
    return f'<ul class="headers">{"".join(items)}</ul>'


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def size(value: int | None) -> str:
    """A byte count in binary units ("1.5 KiB"); '-' when unknown (None or negative)."""
    if value is None or value < 0:
        return "-"
    if value < 1024:
        return f"{value} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:,.1f} {unit}"
