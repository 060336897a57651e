#!/usr/bin/python3
"""Writes assets/corpus.txt, the default training text of the character-level GPT.

The corpus is the project's own prose, in English and Chinese: README.md,
lessons/README.md, then every lesson in lessons/*.toml in file-name order, and
in each lesson every step's Markdown `text` followed by its `reveal` text, the
English before the Chinese. The output is deterministic (same inputs, same
bytes), so re-running this after editing a lesson shows the change in a diff.

    /usr/bin/python3 scripts/make-corpus.py          # writes assets/corpus.txt
    /usr/bin/python3 scripts/make-corpus.py --check  # exits 1 if it is out of date
"""
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "assets" / "corpus.txt"


def clean(markdown: str) -> str:
    # Lesson texts may be indented freely (lessons/FORMAT.md); trailing spaces carry nothing.
    lines = textwrap.dedent(markdown).strip("\n").splitlines()
    return "\n".join(line.rstrip() for line in lines)


def lesson_texts(path: Path) -> list[str]:
    with path.open("rb") as f:
        lesson = tomllib.load(f)
    texts = []
    for step in lesson.get("step", []):
        for lang in ("en", "zh"):
            texts.append(step["text"][lang])
            reveal = step.get("reveal", {}).get("text")
            if reveal:
                texts.append(reveal[lang])
    return texts


def corpus() -> str:
    texts = [(ROOT / path).read_text("utf-8") for path in ("README.md", "lessons/README.md")]
    for path in sorted((ROOT / "lessons").glob("*.toml")):
        texts += lesson_texts(path)
    return "\n\n".join(clean(t) for t in texts if t.strip()) + "\n"


def main() -> int:
    text = corpus()
    if sys.argv[1:] == ["--check"]:
        if OUT.exists() and OUT.read_text("utf-8") == text:
            return 0
        print("assets/corpus.txt is out of date: run scripts/make-corpus.py", file=sys.stderr)
        return 1
    if sys.argv[1:]:
        print("usage: make-corpus.py [--check]", file=sys.stderr)
        return 2
    OUT.write_text(text, "utf-8", newline="\n")
    chars = set(text)
    cjk = sum(1 for c in chars if 0x4E00 <= ord(c) <= 0x9FFF)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(text.encode())} bytes, {len(text)} characters, "
          f"{len(chars)} distinct ({cjk} CJK ideographs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
