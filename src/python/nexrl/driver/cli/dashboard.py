"""``nexrl dashboard``: the run's ``/nexrl`` page on a run folder, after the fact.

    dashboard RUN_FOLDER [--port N] [--address HOST]

(``./pants run src/python/nexrl:dashboard -- runs/<name>``.) Prints the page's URL
and serves until Ctrl-C. A live run serves the same page on its own Dask
dashboard (the console prints that URL at start).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nexrl dashboard", description=__doc__.split("\n")[0])
    p.add_argument("run_folder", help="a run folder (holds metrics.jsonl), e.g. runs/<name>")
    p.add_argument("--port", type=int, default=0, help="port (0: a free one)")
    p.add_argument("--address", default="127.0.0.1", help="address to listen on")
    args = p.parse_args(argv)
    root = Path(args.run_folder)
    if not (root / "metrics.jsonl").exists():
        print(
            f"error: {root}: no metrics.jsonl here; pass a run folder (output_dir of a run)",
            file=sys.stderr,
        )
        return 2
    from nexrl.driver.dashboard.serve import start_server

    try:
        server, url = start_server(root, args.port, args.address)
    except OSError as exc:  # a port in use, an address not on this machine
        print(
            f"error: cannot listen on {args.address}:{args.port} ({exc.strerror or exc}); "
            "pick another --port (0: a free one) or an --address of this machine",
            file=sys.stderr,
        )
        return 2
    print(f"nexrl: dashboard {url}", flush=True)
    try:
        server.io_loop.start()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
