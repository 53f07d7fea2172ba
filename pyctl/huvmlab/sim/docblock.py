"""Generated tables inside the docs: the text between two marker lines is replaced by a module's output."""

from __future__ import annotations

from .errors import SimConfigError


def replace_block(path: str, begin: str, end: str, block: str) -> bool:
    """Replace the text between the lines ``begin`` and ``end`` in ``path`` with ``block``; returns whether the
    file changed. A file without the markers is an error (SimConfigError naming ``update_doc``)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SimConfigError(f"{path}: no '{begin}' ... '{end}' markers", field="update_doc")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    new = head + begin + "\n" + block + end + tail
    if new == text:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return True


def read_block(path: str, begin: str, end: str) -> str:
    """The text between the markers (what :func:`replace_block` wrote), or "" without them."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if begin not in text or end not in text:
        return ""
    return text.split(begin, 1)[1].split(end, 1)[0].removeprefix("\n")
