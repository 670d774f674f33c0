import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BUILD = Path(os.environ.get("TINYGPT_BUILD", ROOT / "build"))
