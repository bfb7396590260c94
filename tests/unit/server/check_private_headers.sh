#!/bin/sh
# Private headers stay private (docs/design/build.md, "Headers"): compiled with exactly the
# include flags of cinfer_frontend, a source may include the frontend's own headers and
# what the libraries it links export, and must fail on another library's private header.
# usage: check_private_headers.sh CC -I... (cinfer_frontend's include directories)
cc=$1
shift
status=0
p() { # p WANT HEADER -I...: WANT is ok or fail
  want=$1 h=$2
  shift 2
  if printf '#include "%s"\nint probe;\n' "$h" | "$cc" -std=gnu11 -D_GNU_SOURCE -fsyntax-only -x c - "$@" 2>/dev/null; then
    got=ok
  else
    got=fail
  fi
  if [ "$got" != "$want" ]; then
    echo "including $h from cinfer_frontend: expected $want, got $got"
    status=1
  fi
}
p ok frontend/kserve.h "$@"      # its own exported header
p ok frontend/classify.h "$@"    # its own private header
p ok net/http.h "$@"             # exported by cinfer_net, which it links
p ok metrics/metrics.h "$@"      # exported by cinfer_metrics (through cinfer_server)
p fail server/internal.h "$@"    # cinfer_server's private header
p fail net/net_buf.h "$@"        # cinfer_net's private header
p fail backends/llm/llm.h "$@"   # the server links its backends PRIVATE
p fail gateway/gateway.h "$@"    # a library it does not link
[ $status = 0 ] && echo "private headers: 8 probes as expected"
exit $status
