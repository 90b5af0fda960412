"""Write the webhook registrations and the pilot's webhook patches from the kind table.

    python webhook/generate.py

Run it after adding a row to quotaguard/kube/kinds.py; tests/deploy fails while the committed
files differ from what it writes. It refreshes the Helm chart's copies too (tools/chart_files.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from quotaguard.webhook.registrations import render  # noqa: E402
from tools.chart_files import refresh  # noqa: E402


def main() -> None:
    for path, text in render().items():
        (ROOT / path).write_text(text)
        print(f"wrote {path}")
    for path in refresh():
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
