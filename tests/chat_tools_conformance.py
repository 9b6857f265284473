#!/usr/bin/env python3
"""make test: the tool-calling chat-template fixtures
(tests/data/chat_templates/tools_*.json) are what jinja2 renders now.

The C renderer is checked against those files byte for byte by
tests/unit/text/test_chat_template.c (tools_conformance); this script closes
the loop by rendering every case again with the installed jinja2, in
transformers' environment (tools/make_chat_tools_conformance.py --check), so
a fixture can neither go stale nor be edited by hand.  Ends with
"N passed, N failed"; skips (exit 0, "0 passed") when jinja2 is missing.
"""
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
try:
    import jinja2  # noqa: F401
except ImportError:
    print("chat_tools_conformance: jinja2 is not installed (pip install jinja2); skipped")
    print("0 passed, 0 failed")
    sys.exit(0)
sys.exit(subprocess.call([sys.executable, os.path.join(ROOT, "tools", "make_chat_tools_conformance.py"),
                          "--check"]))
