#!/bin/sh
# stage the one SmolLM2 part this call carries under /tmp/parts (the host stays warm between calls)
mkdir -p /tmp/parts && for p in .dev/parts/pa*; do [ -f "$p" ] && cp "$p" /tmp/parts/ && echo "staged $p"; done; ls -la /tmp/parts
