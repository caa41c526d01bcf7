"""Reading the rendered reports like a reader would: defects that cost trust, found mechanically.

:func:`check_reports` returns one line per defect in a ``reports/`` directory:

- a stderr output cell (warnings, progress bars) in a page;
- an absolute machine path (``/home/...``, ``/tmp/...``, ``/work/...``) in a page;
- a bare ``nan`` (or ``None``) table cell, or a number printed as nan inside one ("MDE nan = nan%");
- a table without a caption;
- a figure file (or CSV) under ``figures/`` that no page references, or a page reference to a missing file;
- an algorithm drawn in different colours by two figures (``<figure>.colors.json``, written beside each PNG by
  :func:`fairdp_core.reporting.helpers.shower`), or in a colour other than
  :data:`fairdp_core.reporting.plots.ALGORITHM_COLORS`.

:func:`page_heights` measures each page's rendered height at a given width with headless Chromium (when it is
installed): `fairdp check-reports --heights` fails a page taller than the limit (6,000 px at 1,400 px wide).
:func:`first_screen_words` counts the words a reader sees before scrolling (1,400 × 900); the index's limit is
:data:`MAX_FIRST_SCREEN_WORDS`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

__all__ = ["MAX_FIRST_SCREEN_WORDS", "MAX_HEIGHT_PX", "check_reports", "first_screen_words", "page_heights"]

MAX_HEIGHT_PX = 6000
MAX_FIRST_SCREEN_WORDS = 250  # the index, above the fold at 1,400 × 900
_ABS_PATH = re.compile(r"(?<![\w.:/])/(?:home|tmp|work|root|Users|var/folders|mnt)/[\w.\-/]+")


class _Page(HTMLParser):
    """Tables (with or without a caption), cell texts and referenced files of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[bool] = []  # per table: has a caption
        self._stack: list[int] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None
        self.refs: set[str] = set()
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("style", "script"):
            self._skip += 1
        if tag == "table":
            self.tables.append(False)
            self._stack.append(len(self.tables) - 1)
        elif tag == "caption" and self._stack:
            self.tables[self._stack[-1]] = True
        elif tag in ("td", "th"):
            self._cell = []
        for key in ("src", "href"):
            v = a.get(key)
            if v and not re.match(r"^(https?:|data:|#|mailto:)", v):
                self.refs.add(v.split("#")[0])

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._skip = max(0, self._skip - 1)
        if tag == "table" and self._stack:
            self._stack.pop()
        elif tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None and not self._skip:
            self._cell.append(data)


_NAN_IN_TEXT = re.compile(r"(?<![A-Za-z0-9_])(nan|inf)(?![A-Za-z0-9_])(%| pp)?", re.IGNORECASE)


def check_reports(reports_dir: str | os.PathLike) -> list[str]:
    """Every defect a reader would see in ``reports_dir`` (its ``*.html`` pages and ``figures/``); [] when clean."""
    from .plots import ALGORITHM_COLORS

    root = Path(reports_dir)
    problems: list[str] = []
    referenced: set[Path] = set()
    for page in sorted(root.glob("*.html")):
        text = page.read_text()
        if 'data-mime-type="application/vnd.jupyter.stderr"' in text or "output_stderr" in text:
            problems.append(f"{page.name}: a stderr output")
        for m in sorted(set(_ABS_PATH.findall(text)))[:3]:
            problems.append(f"{page.name}: an absolute path {m!r}")
        p = _Page()
        p.feed(text)
        bad = sorted({c for c in p.cells if c.lower() in ("nan", "none", "nan%", "nan pp")})
        if bad:
            problems.append(f"{page.name}: table cells reading {bad}")
        inner = sorted({m.group(0) for c in p.cells if c.lower() not in ("nan", "none", "nan%", "nan pp")
                        for m in [_NAN_IN_TEXT.search(c)] if m})
        if inner:
            problems.append(f"{page.name}: a nan inside table cells ({', '.join(repr(m) for m in inner[:3])})")
        n_bare = sum(not c for c in p.tables)
        if n_bare:
            problems.append(f"{page.name}: {n_bare} of {len(p.tables)} tables without a caption")
        for ref in sorted(p.refs):
            if ref.endswith(".html") and "/" not in ref:
                continue
            target = (root / ref).resolve()
            if not target.exists():
                problems.append(f"{page.name}: references {ref}, which does not exist")
            referenced.add(target)
    figs = root / "figures"
    if figs.is_dir():
        for f in sorted(figs.rglob("*")):
            if f.suffix in (".png", ".csv", ".svg") and f.resolve() not in referenced:
                problems.append(f"{f.relative_to(root)}: no page references it")
        seen: dict[str, tuple[str, str]] = {}
        for f in sorted(figs.rglob("*.colors.json")):
            where = str(f.relative_to(root)).removesuffix(".colors.json")
            for label, colour in json.loads(f.read_text()).items():
                if label in ALGORITHM_COLORS and colour.lower() != ALGORITHM_COLORS[label].lower():
                    problems.append(f"{where}: {label} drawn in {colour}, not its colour {ALGORITHM_COLORS[label]}")
                if label in seen and seen[label][0].lower() != colour.lower():
                    problems.append(f"{where}: {label} drawn in {colour}, but in {seen[label][0]} by {seen[label][1]}")
                seen.setdefault(label, (colour, where))
        for png in sorted(figs.rglob("*.png")):
            if not png.with_name(png.stem + ".colors.json").is_file():
                problems.append(f"{png.relative_to(root)}: no colour mapping beside it")
    return problems


def _chromium() -> str | None:
    return next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)


def page_heights(reports_dir: str | os.PathLike, *, width: int = 1400, shots_dir: str | os.PathLike | None = None,
                 max_height: int = 20000) -> dict[str, int]:
    """Each page's rendered height in px at ``width`` (headless Chromium: a screenshot ``max_height`` tall, cropped
    at the last row that is not background). Screenshots are kept in ``shots_dir`` when given. {} without Chromium."""
    import matplotlib.image as mpimg
    import numpy as np

    exe = _chromium()
    if exe is None:
        return {}
    out: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as td:
        for page in sorted(Path(reports_dir).glob("*.html")):
            shot = Path(shots_dir or td) / f"{page.stem}.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--window-size={width},{max_height}", f"--screenshot={shot}", page.resolve().as_uri()],
                           capture_output=True, timeout=180, check=False)
            if not shot.is_file():
                continue
            img = mpimg.imread(shot)[..., :3]
            rows = np.where((np.abs(img - img[-1:, :, :]).max(axis=(1, 2))) > 0.02)[0]
            out[page.name] = int(rows.max() + 1) if len(rows) else 0
    return out


# Counts, after layout, every whitespace-separated word of the body whose box is visible and starts above the fold;
# the count goes into an attribute that --dump-dom prints. Text in closed <details>, <script> and <style> has no box.
_COUNT_WORDS_JS = """<script>
// a closed <details> hides all but its own <summary>, yet still lays the rest out (content-visibility)
function folded(node) {
  for (let child = node, el = node.parentElement; el; child = el, el = el.parentElement) {
    if (el.tagName === 'DETAILS' && !el.open && !(child.tagName === 'SUMMARY')) return true;
  }
  return false;
}
window.addEventListener('load', () => {
  const fold = window.innerHeight, r = document.createRange();
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let n = 0;
  while (walk.nextNode()) {
    const t = walk.currentNode, re = /\\S+/g;
    if (folded(t)) continue;
    let m;
    while ((m = re.exec(t.data))) {
      r.setStart(t, m.index); r.setEnd(t, m.index + m[0].length);
      const b = r.getBoundingClientRect();
      if (b.width > 0 && b.height > 0 && b.top < fold) n++;
    }
  }
  document.body.setAttribute('data-first-screen-words', n);
});
</script>"""


def first_screen_words(page: str | os.PathLike, *, width: int = 1400, height: int = 900) -> int | None:
    """The words of ``page`` visible before scrolling in a ``width`` × ``height`` window (headless Chromium, the
    page's figures loaded from beside it); None without Chromium. The page itself is not touched: a copy with a
    counting script and a ``<base>`` pointing at the page's folder is rendered from a temporary folder."""
    exe = _chromium()
    if exe is None:
        return None
    page = Path(page).resolve()
    text = page.read_text()
    base = f'<base href="{page.parent.as_uri()}/">'
    text = re.sub(r"<head>", "<head>" + base, text, count=1) if "<head>" in text else base + text
    text = text.replace("</body>", _COUNT_WORDS_JS + "</body>") if "</body>" in text else text + _COUNT_WORDS_JS
    with tempfile.TemporaryDirectory() as td:
        copy = Path(td) / page.name
        copy.write_text(text)
        dom = subprocess.run([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                              f"--window-size={width},{height}", "--virtual-time-budget=10000", "--dump-dom",
                              copy.as_uri()], capture_output=True, text=True, timeout=180, check=False).stdout
    m = re.search(r'data-first-screen-words="(\d+)"', dom)
    return int(m.group(1)) if m else None
