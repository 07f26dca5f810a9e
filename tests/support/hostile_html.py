"""HTML and CSS that tries to run a script or fetch something: the vectors the preview's tests open in a browser.

Each vector is HTML with `REMOTE` standing for a server's base URL, "http://host:port"
(`vectors(url)` puts the real one in). A vector that runs sets `window.mqRan` or reaches
`REMOTE/<its name>`; one that fetches reaches `REMOTE/<its name>`. The CSS ones
are those issue 24 found getting past the old regex sanitiser, and their kin.
"""

from __future__ import annotations

#: Where the server's base URL goes; then the same URL without its scheme ("//host:port"), and
#: without its first letter ("ttp://host:port").
REMOTE, REMOTE_NO_SCHEME, REMOTE_AFTER_H = "REMOTE", "REMOTE_NO_SCHEME", "REMOTE_AFTER_H"

#: CSS that fetched through the hand-written sanitiser (issue 24), and other ways CSS fetches.
CSS_VECTORS: dict[str, str] = {
    "nested-url": '<div style="background: uurl()rl(REMOTE/nested-url)">nested url</div>',
    "nested-import": '<style>@imp@import;ort "REMOTE/nested-import";</style><p>nested @import</p>',
    "escaped-url": '<div style="background: \\75rl(REMOTE/escaped-url)">escaped url</div>',
    "escaped-import": '<style>@\\69mport "REMOTE/escaped-import";</style><p>escaped @import</p>',
    "escaped-url-in-style": "<style>p { background: \\75 rl(REMOTE/escaped-url-in-style) }</style><p>p</p>",
    "style-import": "<style>@import url(REMOTE/style-import);</style>",
    "style-background": "<style>body { background: url(REMOTE/style-background) }</style>",
    "style-font-face": "<style>@font-face { font-family: x; src: url(REMOTE/style-font-face) } p { font-family: x }"
    "</style><p>font</p>",
    "inline-background": '<div style="background-image: url(REMOTE/inline-background)">bg</div>',
    "inline-quoted": "<div style=\"background: url('REMOTE/inline-quoted')\">bg</div>",
    "inline-image-set": "<div style=\"background-image: image-set('REMOTE/inline-image-set' 1x)\">set</div>",
    "inline-list-style": '<ul style="list-style-image: url(REMOTE/inline-list-style)"><li>li</li></ul>',
    "inline-border-image": '<div style="border: 5px solid; border-image: url(REMOTE/inline-border-image) 30">b</div>',
    "inline-cursor": '<div style="cursor: url(REMOTE/inline-cursor), auto">cursor</div>',
    "inline-content": '<p style="content: url(REMOTE/inline-content)">content</p>',
    "inline-mask": '<div style="mask-image: url(REMOTE/mask); -webkit-mask-image: url(REMOTE/webkit-mask)">m</div>',
    "inline-filter": '<div style="filter: url(REMOTE/inline-filter#f)">filter</div>',
    "inline-escaped-property": '<div style="backgr\\6fund: url(REMOTE/inline-escaped-property)">esc</div>',
    "inline-comment-split": '<div style="background: u/**/rl(REMOTE/inline-comment-split)">comment</div>',
    "inline-entity": '<div style="background: &#117;rl(REMOTE/inline-entity)">entity</div>',
    "inline-newline-escape": '<div style="background: url(REMOTE/inline-\\\nnewline-escape)">nl</div>',
    "inline-var": '<div style="--u: url(REMOTE/inline-var); background: var(--u)">var</div>',
    "inline-expression": "<div style=\"width: expression(window.mqRan = 'expression')\">expr</div>",
    "inline-binding": '<div style="-moz-binding: url(REMOTE/inline-binding#x); behavior: url(REMOTE/htc)">b</div>',
}

#: The classic ways for HTML to run a script or fetch: tags, handlers, URLs, parser confusion.
HTML_VECTORS: dict[str, str] = {
    "script": '<script>window.mqRan = "script"; new Image().src = "REMOTE/script";</script>',
    "script-src": '<script src="REMOTE/script-src"></script>',
    "script-upper": '<SCRIPT>window.mqRan = "SCRIPT"</SCRIPT>',
    "script-split": '<scr<script>ipt>window.mqRan = "split"</scr</script>ipt>',
    "img-remote": '<img src="REMOTE/img-remote" alt="remote image">',
    "img-relative-proto": '<img src="REMOTE_NO_SCHEME/img-relative-proto">',
    "img-onerror": "<img src=x onerror=\"window.mqRan='onerror'; new Image().src='REMOTE/img-onerror'\">",
    "img-srcset": '<img srcset="REMOTE/img-srcset 1x">',
    "img-entity-url": '<img src="&#104;REMOTE_AFTER_H/img-entity-url">',
    "picture-source": '<picture><source srcset="REMOTE/picture-source"><img src="data:,x"></picture>',
    "body-onload": "<body onload=\"window.mqRan='onload'\">",
    "body-background": '<body background="REMOTE/body-background">',
    "table-background": '<table background="REMOTE/table-background"><tr><td background="REMOTE/td-bg">t</td></tr>'
    "</table>",
    "svg-onload": "<svg onload=\"window.mqRan='svg-onload'\"></svg>",
    "svg-image": '<svg><image href="REMOTE/svg-image" /></svg>',
    "svg-use": '<svg><use href="REMOTE/svg-use#x" /></svg>',
    "svg-script": "<svg><script>window.mqRan='svg-script'</script></svg>",
    "math-confusion": "<math><mtext><table><mglyph><style><img src=x onerror=\"window.mqRan='mxss'\">",
    "noscript-confusion": "<noscript><p title=\"</noscript><img src=x onerror=window.mqRan='noscript'>\">",
    "style-confusion": "<style><img src=x onerror=\"window.mqRan='style-confusion'\"></style>",
    "comment-confusion": "<!--<img src=\"--><img src=x onerror=window.mqRan='comment'//\">",
    "cdata": "<![CDATA[<img src=x onerror=window.mqRan='cdata'>]]>",
    "iframe": '<iframe src="REMOTE/iframe"></iframe>',
    "iframe-srcdoc": "<iframe srcdoc=\"<script>parent.mqRan='srcdoc'</script>\"></iframe>",
    "object": '<object data="REMOTE/object"></object>',
    "embed": '<embed src="REMOTE/embed">',
    "link-stylesheet": '<link rel="stylesheet" href="REMOTE/link-stylesheet">',
    "link-preload": '<link rel="preload" as="image" href="REMOTE/link-preload">',
    "meta-refresh": '<meta http-equiv="refresh" content="0;url=REMOTE/meta-refresh">',
    "base-href": '<base href="REMOTE/base/"><img src="base-relative.png">',
    "form-autofocus": '<form action="REMOTE/form"><input autofocus onfocus="window.mqRan=\'onfocus\'"></form>',
    "input-image": '<input type="image" src="REMOTE/input-image">',
    "details-toggle": "<details open ontoggle=\"window.mqRan='ontoggle'\"><summary>s</summary></details>",
    "video-poster": '<video poster="REMOTE/video-poster" src="REMOTE/video"></video>',
    "audio-onerror": "<audio src=x onerror=\"window.mqRan='audio'\"></audio>",
    "marquee": "<marquee onstart=\"window.mqRan='marquee'\">m</marquee>",
    "a-javascript": '<a id="js-link" href="javascript:window.mqRan=\'link\'">a link</a>',
    "a-entity-javascript": '<a href="&#106;avascript:window.mqRan=1">entity link</a>',
    "a-ping": '<a href="REMOTE/a" ping="REMOTE/a-ping">ping</a>',
    "attribute-breakout": '<p title=""><img src=x onerror=window.mqRan=\'breakout\'>">',
    "unquoted-attribute": "<p title=x onmouseover=window.mqRan='unquoted'>hover</p>",
    "template": "<template><img src=x onerror=\"window.mqRan='template'\"></template>",
    "xmp": "<xmp><img src=x onerror=\"window.mqRan='xmp'\"></xmp>",
    "plaintext-end": "<textarea></textarea><img src=x onerror=\"window.mqRan='textarea'\">",
}

#: A remote image, the ordinary tracking pixel of a newsletter.
REMOTE_IMAGE = '<img src="REMOTE/tracking-pixel.png" width="1" height="1" alt="">'


def vectors(remote: str) -> dict[str, str]:
    """Every vector (CSS, HTML, the remote image) with `remote` as the server's base URL."""
    every = {**CSS_VECTORS, **HTML_VECTORS, "remote-image": REMOTE_IMAGE}
    return {
        name: html.replace(REMOTE_NO_SCHEME, remote.split(":", 1)[1])
        .replace(REMOTE_AFTER_H, remote[1:])
        .replace(REMOTE, remote)
        for name, html in every.items()
    }


def hostile_document(remote: str) -> str:
    """One HTML document holding every vector, each after a paragraph naming it."""
    parts = [f'<p class="vector">{name}</p>{html}' for name, html in vectors(remote).items()]
    return '<html><head><title>hostile</title></head><body><p id="greeting">Hello</p>' + "\n".join(parts)
