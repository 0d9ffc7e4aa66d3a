#!/usr/bin/env python3
"""Checks every relative link and #anchor in README.md and docs/src/**/*.md, and that every
page of docs/src is in SUMMARY.md. Exits 1, naming each broken link, when one is found.

Links to web addresses are not fetched (the check runs offline). Anchors are the ids mdBook and
GitHub give a heading: lower case, letters, digits, `-` and `_` kept, spaces made `-`, anything
else dropped, and `-1`, `-2`, ... appended to a repeated id.
"""

import os
import re
import sys
from urllib.parse import unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "docs", "src")

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML = re.compile(r"""<(?:img|a)\s[^>]*?(?:src|href)\s*=\s*["']([^"']+)["']""", re.I)


def prose(text, keep_code=False):
    """The text outside fenced code blocks and inline code (where links are not links)."""
    out, fence = [], None
    for line in text.split("\n"):
        stripped = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
            continue
        if fence is not None:
            s = stripped.strip()
            if len(s) >= len(fence) and set(s) == {fence[0]}:
                fence = None
            out.append("")
            continue
        out.append(line if keep_code else re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    return out


def heading_ids(path):
    ids, seen = set(), {}
    for line in prose(open(path, encoding="utf-8").read(), keep_code=True):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    # explicit anchors: <a id="..."> or <a name="...">
    for m in re.finditer(r"""<a\s+(?:id|name)\s*=\s*["']([^"']+)["']""", open(path, encoding="utf-8").read()):
        ids.add(m.group(1))
    return ids


def slug(title):
    # The heading as rendered: inline code and emphasis markers dropped, links by their text.
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)
    title = title.replace("`", "").replace("*", "")
    out = []
    for ch in title.strip().lower():
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def pages():
    files = [os.path.join(ROOT, "README.md")]
    for d, _, names in os.walk(SRC):
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    return files


def main():
    errors = []
    for path in pages():
        rel = os.path.relpath(path, ROOT)
        lines = prose(open(path, encoding="utf-8").read())
        # Links only in HTML comments are not shown: leave them out too.
        text = re.sub(r"<!--.*?-->", "", "\n".join(lines), flags=re.S)
        for n, line in enumerate(text.split("\n"), 1):
            for m in list(LINK.finditer(line)) + list(HTML.finditer(line)):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    continue  # a web address or mailto:
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), unquote(file_part))) if file_part else path
                if not os.path.exists(dest):
                    errors.append(f"{rel}:{n}: {target}: no such file")
                    continue
                if anchor and dest.endswith(".md") and anchor not in heading_ids(dest):
                    errors.append(f"{rel}:{n}: {target}: no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
    summary = open(os.path.join(SRC, "SUMMARY.md"), encoding="utf-8").read()
    listed = {os.path.normpath(os.path.join(SRC, t.partition("#")[0])) for t in LINK.findall(summary)}
    for path in pages()[1:]:
        if os.path.basename(path) != "SUMMARY.md" and path not in listed:
            errors.append(f"{os.path.relpath(path, ROOT)}: not in docs/src/SUMMARY.md")
    for e in errors:
        print(f"doc-links: {e}", file=sys.stderr)
    if errors:
        print(f"doc-links: {len(errors)} broken", file=sys.stderr)
        return 1
    print(f"doc-links: {len(pages())} pages, every relative link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
