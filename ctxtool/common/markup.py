"""Session text inside the markup ctxtool writes: markdown, HTML, XML and GitHub workflow commands.

Owns the one escaping function of each markup: every report that writes one goes through these, never an
escaper of its own, since text from a session may hold anything. A renderer shows the original characters;
those the markup cannot hold at all are written as U+FFFD. Standard library only: any layer may use it.
"""

from __future__ import annotations

import html
import re
from xml.etree import ElementTree as ET

# ASCII punctuation that starts inline markdown in a table cell or after a list marker (code spans,
# emphasis, links, table pipes, GitHub's math, the backslash itself), written with a backslash. Digits and
# ``.,+-%`` are left alone, so numbers read as numbers; block syntax needs the start of a line, which the
# escaped text never has (a line break becomes ``<br>``).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]~|$])")
_MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": "<br>", "\r": "&#13;"}
_MD_ENTITY = re.compile("[&<>\n\r]")


def escape_markdown(text: str) -> str:
    """``text`` as inline GitHub-flavoured markdown that shows exactly ``text``: safe in a table cell, a
    list item or a paragraph. HTML in it is shown as text (``<script>`` is ``&lt;script&gt;``)."""
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _MD_ENTITY.sub(lambda m: _MD_ENTITIES[m.group()], text)


def markdown_code_block(text: str, info: str = "") -> str:
    """``text`` as a fenced code block, shown verbatim: the fence is longer than any run of backticks in
    the text, so no line of it can close the block."""
    runs = [len(run) for run in re.findall("`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    body = text if text.endswith(("\n", "\r")) else text + "\n"
    return f"{fence}{info}\n{body}{fence}"


_NOT_UTF8 = re.compile("[\x00\ud800-\udfff]")


def escape_html(text: str) -> str:
    """``text`` as HTML text or a quoted attribute value: ``&``, ``<``, ``>``, both quotes and a carriage
    return as character references (a parser turns a literal CR into a line feed)."""
    return html.escape(_NOT_UTF8.sub("\ufffd", text), quote=True).replace("\r", "&#13;")


_SCRIPT_JSON = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_JSON_RE = re.compile("[<>&\u2028\u2029]")


def json_in_html_script(json_text: str) -> str:
    """JSON text safe inside an HTML ``<script>`` element, whatever strings it holds: ``<``, ``>`` and
    ``&`` as JSON ``\\u`` escapes, so no ``</script>`` or ``<!--`` can appear, and U+2028/U+2029 too (line
    terminators in JavaScript before ES2019). The parsed value is the same."""
    return _SCRIPT_JSON_RE.sub(lambda m: _SCRIPT_JSON[m.group()], json_text)


# Characters XML 1.0 cannot hold, even as references: C0 controls but tab, LF and CR; lone surrogates;
# U+FFFE and U+FFFF (https://www.w3.org/TR/xml/#charsets).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_XML_TEXT = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"}
_XML_ATTRIBUTE = {**_XML_TEXT, '"': "&quot;", "\n": "&#10;", "\t": "&#9;"}
_XML_TEXT_RE = re.compile("[&<>\r]")
_XML_ATTRIBUTE_RE = re.compile('[&<>\r"\n\t]')


def escape_xml(text: str, *, attribute: bool = False) -> str:
    """``text`` as XML 1.0 character data, or (``attribute``) as a double-quoted attribute value, which a
    parser gives back exactly (a carriage return, and in an attribute a line feed or tab, as a reference)."""
    text = _XML_INVALID.sub("\ufffd", text)
    table, pattern = (_XML_ATTRIBUTE, _XML_ATTRIBUTE_RE) if attribute else (_XML_TEXT, _XML_TEXT_RE)
    return pattern.sub(lambda m: table[m.group()], text)


def xml_document(root: ET.Element) -> bytes:
    """An XML document of the tree ``root`` (UTF-8, with its declaration), indented by two spaces per
    level, every text and attribute value written with ``escape_xml``. Elements hold either text or child
    elements (tails are not written)."""
    lines: list[str] = []

    def write(element: ET.Element, depth: int) -> None:
        pad = "  " * depth
        attrs = "".join(f' {k}="{escape_xml(str(v), attribute=True)}"' for k, v in element.attrib.items())
        text = escape_xml(element.text) if element.text else ""
        if len(element) == 0:
            end = f">{text}</{element.tag}>" if text else " />"
            lines.append(f"{pad}<{element.tag}{attrs}{end}")
            return
        lines.append(f"{pad}<{element.tag}{attrs}>{text}")
        for child in element:
            write(child, depth + 1)
        lines.append(f"{pad}</{element.tag}>")

    write(root, 0)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n' + "\n".join(lines) + "\n").encode()


def workflow_data(text: str) -> str:
    """``text`` as the message of a GitHub Actions workflow command (``::error …::MESSAGE``): ``%``, CR and
    LF percent-encoded, as the runner decodes them (actions/toolkit ``escapeData``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def workflow_property(text: str) -> str:
    """``text`` as a property value of a workflow command (``title=…``): also ``:`` and ``,`` encoded
    (actions/toolkit ``escapeProperty``)."""
    return workflow_data(text).replace(":", "%3A").replace(",", "%2C")
