"""A safe look at a queued message for the admin: headers, text, sanitized HTML, attachments.

The HTML is rebuilt by nh3 (ammonia, an HTML5 parser's tree) from an allow-list:
no scripts, no event handlers, no frames, forms, `<style>`, `<meta>`, `<base>` or
`<link>`, no link targets, images only from `data:`, and inline `style` kept only
for properties that cannot name a URL (`PREVIEW_STYLE_PROPERTIES`, parsed and
re-serialized by a CSS parser, escapes decoded). The admin then shows it only
inside `<iframe sandbox="" srcdoc="...">` whose document starts with the
Content-Security-Policy `PREVIEW_CSP`. docs/admin.md says what each layer stops.
"""

from __future__ import annotations

import email
import email.policy
import re
from dataclasses import dataclass, field
from email.message import EmailMessage, Message

import nh3

#: The policy at the top of the preview's document: no script, no fetch, inline styles and data: images only.
PREVIEW_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

#: At most this many characters of a text or HTML part are shown.
MAX_PREVIEW_CHARS = 200_000
#: A header value longer than this is cut.
MAX_HEADER_CHARS = 2_000

#: Kept, their attributes filtered; any other tag goes and its text stays.
_ALLOWED_TAGS = frozenset(
    "a abbr address b bdi bdo big blockquote br caption center cite code col colgroup dd del dfn div dl dt em "
    "font h1 h2 h3 h4 h5 h6 hr i img ins kbd li mark ol p pre q s samp small span strike strong sub sup "
    "table tbody td tfoot th thead tr tt u ul var".split()
)
#: Dropped with everything inside them.
_DROPPED_WITH_CONTENT = frozenset(
    "script style noscript template iframe frame frameset object embed applet svg math textarea select "
    "title audio video canvas xmp noembed noframes".split()
)
#: Layout attributes, on any kept tag; `src` only on `img` and only `data:` (`_attribute`). No `href`, no
#: `background`, no `srcset`: nothing that names a URL.
_ALLOWED_ATTRIBUTES = {
    "*": frozenset(
        "align alt bgcolor border cellpadding cellspacing class color colspan dir face height hspace lang "
        "rowspan size span start style title type valign vspace width".split()
    ),
    "img": frozenset({"src"}),
}
#: The CSS properties kept in a `style` attribute: none whose value may be a URL or an image (no
#: `background`, `list-style`, `border-image`, `cursor`, `content`, `mask`, `filter`, custom properties).
PREVIEW_STYLE_PROPERTIES = frozenset(
    "color background-color opacity font font-family font-size font-style font-variant font-weight "
    "line-height letter-spacing word-spacing white-space text-align text-decoration text-decoration-color "
    "text-decoration-line text-decoration-style text-indent text-transform vertical-align direction "
    "width height min-width max-width min-height max-height display float clear visibility overflow "
    "margin margin-top margin-right margin-bottom margin-left padding padding-top padding-right "
    "padding-bottom padding-left border border-top border-right border-bottom border-left border-color "
    "border-style border-width border-top-color border-right-color border-bottom-color border-left-color "
    "border-top-style border-right-style border-bottom-style border-left-style border-top-width "
    "border-right-width border-bottom-width border-left-width border-radius border-collapse border-spacing "
    "table-layout caption-side empty-cells".split()
)
_DATA_IMAGE = re.compile(r"^data:image/(png|gif|jpe?g|webp|bmp);base64,[a-z0-9+/=\s]*$", re.IGNORECASE)


@dataclass(frozen=True)
class Attachment:
    """A part of the message meant to be saved rather than read: its name, type and decoded size."""

    filename: str
    content_type: str
    size: int


@dataclass(frozen=True)
class MessagePreview:
    """What the admin shows of a message. `html` is sanitized; `html_source` is the raw HTML, to show escaped."""

    headers: list[tuple[str, str]] = field(default_factory=list)
    text: str | None = None
    html: str | None = None
    html_source: str | None = None
    attachments: list[Attachment] = field(default_factory=list)
    #: a part was longer than `MAX_PREVIEW_CHARS` and is shown cut
    truncated: bool = False
    #: what could not be read (a bad charset, a broken part), for the operator
    problems: list[str] = field(default_factory=list)

    @property
    def srcdoc(self) -> str | None:
        """The sandboxed iframe's document: the CSP first, then the sanitized HTML."""
        return None if self.html is None else sandbox_document(self.html)


def preview_message(data: bytes, *, max_chars: int = MAX_PREVIEW_CHARS) -> MessagePreview:
    """Read `data` (a message as queued) into a `MessagePreview`; never raises for a malformed message."""
    message = email.message_from_bytes(data, policy=email.policy.default)
    headers = [(name, _header_value(message, name, value)) for name, value in message.raw_items()]
    found = _Parts(max_chars)
    found.walk(message)
    return MessagePreview(
        headers=headers,
        text=found.text,
        html=sanitize_html(found.html) if found.html is not None else None,
        html_source=found.html,
        attachments=found.attachments,
        truncated=found.truncated,
        problems=found.problems,
    )


def sandbox_document(body_html: str) -> str:
    """A whole HTML document for `srcdoc`: `PREVIEW_CSP` as its first element, then `body_html`."""
    return (
        "<!DOCTYPE html><html><head>"
        f'<meta http-equiv="Content-Security-Policy" content="{PREVIEW_CSP}">'
        '<meta charset="utf-8"><meta name="referrer" content="no-referrer">'
        "</head><body>" + body_html + "</body></html>"
    )


def sanitize_html(source: str) -> str:
    """`source` rebuilt from an allow-list of tags, attributes and CSS properties: nothing in it can run or fetch."""
    return nh3.clean(
        source,
        tags=set(_ALLOWED_TAGS),
        clean_content_tags=set(_DROPPED_WITH_CONTENT),
        attributes={tag: set(names) for tag, names in _ALLOWED_ATTRIBUTES.items()},
        attribute_filter=_attribute,
        url_schemes={"data"},
        link_rel=None,
        strip_comments=True,
        filter_style_properties=set(PREVIEW_STYLE_PROPERTIES),
    )


def _attribute(tag: str, name: str, value: str) -> str | None:
    """An image's `src` stays only as a base64 `data:` image; every other allowed attribute as it is."""
    if name == "src":
        value = value.strip()
        return value if tag == "img" and _DATA_IMAGE.match(value) else None
    return value


# --- reading parts ------------------------------------------------------------------------


class _Parts:
    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.text: str | None = None
        self.html: str | None = None
        self.attachments: list[Attachment] = []
        self.truncated = False
        self.problems: list[str] = []

    def walk(self, part: Message) -> None:
        content_type = part.get_content_type()
        if part.is_multipart():
            for sub in part.get_payload():
                if isinstance(sub, Message):
                    self.walk(sub)
            return
        disposition = part.get_content_disposition()
        filename = part.get_filename()
        if disposition == "attachment" or filename or content_type == "message/rfc822":
            self.attachments.append(
                Attachment(filename=_clean(filename or ""), content_type=content_type, size=_size(part))
            )
            return
        if content_type == "text/plain" and self.text is None:
            self.text = self._read_text(part)
        elif content_type == "text/html" and self.html is None:
            self.html = self._read_text(part)
        elif not content_type.startswith("text/"):
            self.attachments.append(Attachment(filename="", content_type=content_type, size=_size(part)))

    def _read_text(self, part: Message) -> str:
        try:
            content = part.get_content() if isinstance(part, EmailMessage) else None
            if not isinstance(content, str):
                raise LookupError("not text")
        except (LookupError, ValueError, UnicodeError) as exc:
            self.problems.append(f"{part.get_content_type()} part read as UTF-8 with replacements ({exc})")
            payload = part.get_payload(decode=True)
            content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
        content = content.replace("\r\n", "\n")
        if len(content) > self.max_chars:
            self.truncated = True
            content = content[: self.max_chars]
        return _clean(content)


def _size(part: Message) -> int:
    payload = part.get_payload(decode=True)
    if isinstance(payload, bytes):
        return len(payload)
    raw = part.get_payload()
    return len(raw.encode("utf-8", "replace")) if isinstance(raw, str) else 0


def _header_value(message: Message, name: str, raw: object) -> str:
    """The header decoded (RFC 2047 words, folding); as it came when it cannot be."""
    try:
        value = str(message.policy.header_fetch_parse(name, str(raw)))
    except Exception:  # any parse failure of a hostile header: show the raw text instead
        value = str(raw)
    value = _clean(value)
    return value if len(value) <= MAX_HEADER_CHARS else value[:MAX_HEADER_CHARS] + " …"


def _clean(text: str) -> str:
    """Text without NULs and lone surrogates, which a page cannot carry."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
