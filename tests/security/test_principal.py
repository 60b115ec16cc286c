"""ssl.principal.mapping.rules with Kafka's own test cases (SslPrincipalMapperTest), and
subject DNs printed as Java's X500Principal.getName() prints them."""

import pytest

from fastlog.security import AuthenticationFailed, PrincipalMapper, SecurityConfigError, format_dn
from fastlog.security.der import TAG_BMP, TAG_IA5, TAG_PRINTABLE, TAG_UTF8

CN, OU, ORG, C, DC = "2.5.4.3", "2.5.4.11", "2.5.4.10", "2.5.4.6", "0.9.2342.19200300.100.1.25"
EMAIL = "1.2.840.113549.1.9.1"


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    PrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    "RULE:^CN=(unclosed/$1/",  # not a regular expression
])
def test_invalid_rules(rules):
    with pytest.raises(SecurityConfigError) as e:
        PrincipalMapper(rules)
    assert "\n" not in str(e.value)


def test_mapping():
    mapper = PrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert mapper.principal("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "User:duke"


@pytest.mark.parametrize("expected,rules", [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
     "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected, rules):
    # Kafka prints a rule without its trailing "/" when it has no case flag
    assert str(PrincipalMapper(rules)) == expected


def test_comma_with_whitespace():
    mapper = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_back_reference_to_missing_group_is_literal():
    assert PrincipalMapper("RULE:^CN=(.*)$/$1@$4/").name("CN=a") == "a@$4"
    assert PrincipalMapper("RULE:^CN=(.*)$/$12/").name("CN=a") == "a2"


def test_no_matching_rule_is_an_authentication_failure():
    with pytest.raises(AuthenticationFailed):
        PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x,OU=Other")
    assert PrincipalMapper("").rules == []


def test_dn_order_keywords_and_oid_form():
    rdns = [[(C, TAG_PRINTABLE, b"US")], [(ORG, TAG_UTF8, b"Acme")],
            [(OU, TAG_UTF8, b"Eng")], [(CN, TAG_UTF8, b"client1")],
            [(EMAIL, TAG_IA5, b"a@b.c")]]
    assert format_dn(rdns) == "1.2.840.113549.1.9.1=#16056140622e63,CN=client1,OU=Eng,O=Acme,C=US"


def test_dn_escaping_as_java():
    rdns = [[(DC, TAG_IA5, b"com")],
            [(CN, TAG_UTF8, b' #a,b+c=d"e\\f<g>h;i ')],
            [(ORG, TAG_BMP, "Ünï".encode("utf-16-be"))],
            [(CN, TAG_UTF8, b"x"), (OU, TAG_UTF8, b"y")]]
    assert format_dn(rdns) == (
        'CN=x+OU=y,O=Ünï,CN=\\ \\#a\\,b\\+c\\=d\\"e\\\\f\\<g\\>h\\;i\\ ,DC=com')
