#!/usr/bin/env python3
"""Counts the lines of the model code that exist only for MegaOps (tiling, dynamic
shapes, semaphores, placement, ...) against the rest of its code lines.

A line counts when it is non-blank and not a comment: `//`, `//!` and `///` lines and
lines inside /* */ blocks are skipped, and a file stops at its first `#[cfg(test)]` line
(the test module). A code line is "megaops-only" when it matches any pattern of
MEGAOPS_ONLY (word-boundary regexes, case-sensitive unless marked (?i)); every other code
line is "base".

Usage: scripts/loc.py [--list] [PATH|GLOB ...]
  default paths: megaops-models/src/layers/*.rs megaops-models/src/model.rs
  --list prints every megaops-only line with the pattern that matched.
Plain python3, no dependencies.
"""

import glob
import os
import re
import sys

# The words that mark MegaOps-specific code (the engine's own machinery, as opposed to
# the model math a plain implementation would also have). Edit here.
MEGAOPS_ONLY = [
    r"\bTiled\w*",
    r"\bDynRows\b",
    r"\bDynGrid\b",
    r"\bRows<",
    r"\bGrid\w*",
    r"\b(?i:rearm)\w*",
    r"\bReleaseNext\b",
    r"\b(?i:release)\w*",
    r"\bLaunchOptions\b",
    r"\bPlacement\b",
    r"\bSplitWorkspace\b",
    r"\b(?i:semaphore)s?\b",
    r"\b(?i:tiling)\b",
    r"\bAsyncStream\b",
    r"\b(?i:capture)[sd]?\b",
    r"\b(?i:remap)\w*",
    r"\b(?i:occupancy)\b",
    r"\b(?i:prefetch)\w*",
]
PATTERNS = [(p, re.compile(p)) for p in MEGAOPS_ONLY]

DEFAULT_PATHS = ["megaops-models/src/layers/*.rs", "megaops-models/src/model.rs"]


def count(path, listing=None):
    """(megaops-only lines, base lines) of one file."""
    mo = base = 0
    in_block = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for no, raw in enumerate(f, 1):
            line = raw.strip()
            if line.startswith("#[cfg(test)]"):
                break
            if in_block:
                if "*/" in line:
                    in_block = False
                    line = line.split("*/", 1)[1].strip()
                else:
                    continue
            if line.startswith("/*"):
                if "*/" not in line[2:]:
                    in_block = True
                    continue
                line = line[2:].split("*/", 1)[1].strip()
            if not line or line.startswith("//"):
                continue
            # A trailing `// comment` does not make a line megaops-only.
            code = strip_trailing_comment(line)
            hit = next((p for p, rx in PATTERNS if rx.search(code)), None)
            if hit:
                mo += 1
                if listing is not None:
                    listing.append(f"{path}:{no}: [{hit}] {line}")
            else:
                base += 1
    return mo, base


def strip_trailing_comment(line):
    """The line without a `//` comment outside string literals (approximate: handles "..."
    with escapes; a `//` inside a char literal or raw string is rare in this code)."""
    out, i, in_str = [], 0, False
    while i < len(line):
        c = line[i]
        if in_str:
            if c == "\\":
                out.append(line[i:i + 2])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif line.startswith("//", i):
            break
        out.append(c)
        i += 1
    return "".join(out)


def ratio(mo, base):
    return f"{mo / base:.3f}" if base else "n/a"


def main(argv):
    listing = [] if "--list" in argv else None
    args = [a for a in argv if a != "--list"]
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    specs = args or DEFAULT_PATHS
    files = []
    for s in specs:
        hits = sorted(glob.glob(s))
        if not hits and os.path.exists(s):
            hits = [s]
        if not hits:
            print(f"warning: {s}: no such file", file=sys.stderr)
        files += [h for h in hits if os.path.isfile(h) and h not in files]
    if not files:
        print("no files", file=sys.stderr)
        return 1
    rows = []
    tmo = tbase = 0
    for p in files:
        mo, base = count(p, listing)
        rows.append((p, mo, base))
        tmo += mo
        tbase += base
    w = max(len("total"), *(len(p) for p, _, _ in rows))
    print(f"{'file'.ljust(w)}  {'megaops-only':>12}  {'base':>6}  {'ratio':>6}")
    for p, mo, base in rows:
        print(f"{p.ljust(w)}  {mo:>12}  {base:>6}  {ratio(mo, base):>6}")
    print(f"{'total'.ljust(w)}  {tmo:>12}  {tbase:>6}  {ratio(tmo, tbase):>6}")
    print("(ratio = megaops-only / base code lines; comments, blank lines and #[cfg(test)] modules excluded)")
    if listing is not None:
        print()
        print("\n".join(listing))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
