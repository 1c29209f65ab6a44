"""A sweep's rows written where --out asks, with what produced them: the script's first docstring
line, the GPU's name, the UTC date and the command line (a history file must name them)."""
import json
import sys
import time


def dump_rows(argv: list, doc: str, rows: list, **extra) -> None:
    """Write {what, device, date, command, **extra, rows} to the path after --out in argv, if any."""
    if "--out" not in argv:
        return
    import cupy as cp
    meta = {"what": doc.split("\n")[0], "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv), **extra}
    with open(argv[argv.index("--out") + 1], "w") as f:
        json.dump(dict(meta, rows=rows), f, indent=1)
