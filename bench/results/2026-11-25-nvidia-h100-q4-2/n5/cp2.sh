#!/bin/sh
# stage the SmolLM2 part(s) this call carries under /tmp/p2 (the host stays warm between calls)
mkdir -p /tmp/p2 && for p in .dev/p2/q*; do [ -f "$p" ] && cp "$p" /tmp/p2/ && echo "staged $p"; done; ls -la /tmp/p2
