#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Checks a flame graph page of stb (--format flamegraph): well-formed HTML
# (every element closed in order, nothing after </html>), no external
# resource, one "fg-data" JSON document of schema stb-flamegraph/1 whose
# nodes form a tree (preorder depths, a node's count at least the sum of its
# children's, the root's the total), and the frame names given as arguments
# among its names. Prints "names N nodes M total T bytes B". Exit 1 on error.
import html.parser
import json
import sys

VOID = {"meta", "input", "br", "img", "link", "hr", "area", "base", "col", "embed",
        "source", "track", "wbr"}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.data, self.in_data, self.errors, self.ended = [], [], False, [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.ended:
            self.errors.append(f"<{tag}> after </html>")
        for k in ("src", "href"):
            if k in a and a[k] and ("://" in a[k] or a[k].startswith("//")):
                self.errors.append(f"external resource {a[k]}")
        if tag in VOID:
            return
        self.stack.append(tag)
        self.in_data = tag == "script" and a.get("id") == "fg-data"

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        self.in_data = False
        if tag == "html":
            self.ended = True

    def handle_data(self, d):
        if self.in_data:
            self.data.append(d)
        elif self.ended and d.strip():
            self.errors.append("text after </html>")


def main():
    if len(sys.argv) < 2:
        print("usage: check_flamegraph.py FILE [FRAME...]", file=sys.stderr)
        return 64
    raw = open(sys.argv[1], "rb").read()
    text = raw.decode("utf-8")  # must be valid UTF-8
    if not text.startswith("<!DOCTYPE html>"):
        return fail("no <!DOCTYPE html>")
    p = Page()
    p.feed(text)
    p.close()
    if p.errors:
        return fail("; ".join(p.errors[:5]))
    if p.stack:
        return fail(f"unclosed elements {p.stack}")
    if not p.data:
        return fail("no fg-data script")
    doc = json.loads("".join(p.data))
    if doc.get("schema") != "stb-flamegraph/1":
        return fail(f"schema {doc.get('schema')!r}")
    names, nodes = doc["names"], doc["nodes"]
    if len(nodes) % 3 or not nodes:
        return fail("nodes is not (depth, name, count) triples")
    n = len(nodes) // 3
    depth = [nodes[3 * i] for i in range(n)]
    name = [nodes[3 * i + 1] for i in range(n)]
    value = [nodes[3 * i + 2] for i in range(n)]
    if depth[0] != 0 or names[name[0]] != "all" or value[0] != doc["total"]:
        return fail("node 0 is not the root 'all' with the total")
    child_sum = [0] * n
    stack = [0]
    for i in range(1, n):
        if depth[i] < 1 or depth[i] > depth[i - 1] + 1:
            return fail(f"node {i}: depth {depth[i]} after {depth[i - 1]}")
        if not 0 <= name[i] < len(names):
            return fail(f"node {i}: name index {name[i]}")
        del stack[depth[i]:]
        child_sum[stack[-1]] += value[i]
        stack.append(i)
    for i in range(n):
        if value[i] <= 0 or child_sum[i] > value[i]:
            return fail(f"node {i} ({names[name[i]]}): count {value[i]} < its children's "
                        f"{child_sum[i]}")
    missing = [f for f in sys.argv[2:] if f not in names]
    if missing:
        return fail(f"frames missing: {missing}")
    print(f"names {len(names)} nodes {n} total {doc['total']} bytes {len(raw)}")
    return 0


def fail(why):
    print(f"check_flamegraph: {sys.argv[1]}: {why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
