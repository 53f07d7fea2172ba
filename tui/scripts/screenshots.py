"""Regenerate the huvm-top screenshots of docs/tui.md: SVGs at 80x24 and 160x50, headless (Textual's pilot),
of huvm-top over the simulated node running huvm's shipped consolidation example.

    python tui/scripts/screenshots.py [OUTDIR]       # default docs/img; `make tui-screenshots` runs it

Each run lets the simulation go for a few seconds first, so that the rates and graphs have something to
show; the figures differ from run to run by how far the simulation got.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from huvm_top.app import HuvmTop
from huvm_top.sources.sim import SimSource

SIZES: tuple[tuple[int, int], ...] = ((80, 24), (160, 50))
RUN_S = 6.0  # wall seconds of simulation before the picture
INTERVAL_S = 0.5


async def shoot(size: tuple[int, int], out: Path) -> Path:
    source = SimSource(speed=2.0)
    app = HuvmTop(source, interval=INTERVAL_S)
    async with app.run_test(size=size) as pilot:
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while app.refreshes * INTERVAL_S < RUN_S:
            if loop.time() > end:
                raise SystemExit(f"huvm-top did not refresh (waiting: {app.waiting}, error: {app.error})")
            await pilot.pause(0.1)
        await pilot.pause(0.2)
        name = f"huvm-top-{size[0]}x{size[1]}.svg"
        app.save_screenshot(filename=name, path=str(out))
    return out / name


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2] / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    for size in SIZES:
        print(asyncio.run(shoot(size, out)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
