#!/bin/sh
# stage the SmolLM2 part this call carries (.dev/pa, pb or pc) under /tmp/p2; the host stays warm between calls
mkdir -p /tmp/p2 && for p in .dev/pa/qa .dev/pb/qb .dev/pc/qc; do [ -f "$p" ] && cp "$p" /tmp/p2/ && echo "staged $p"; done; ls -la /tmp/p2
