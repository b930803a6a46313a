"""A proxyless gRPC client: dials `xds:///<target>` through grpcio's own
xDS client (bootstrap from GRPC_XDS_BOOTSTRAP / GRPC_XDS_BOOTSTRAP_CONFIG)
and, for each line `N` on stdin, makes N calls to `/legate.test.Echo/Who`
and prints one JSON line: how many calls each backend answered, or stops
at the first error and counts it.

With `--xds-creds`, the channel uses xDS credentials: mTLS when the
clusters carry a certificate-provider TLS context, plain text otherwise."""

import json
import sys

import grpc
import grpc.experimental


def main():
    target = sys.argv[1]
    if "--xds-creds" in sys.argv:
        creds = grpc.xds_channel_credentials(fallback_credentials=grpc.experimental.insecure_channel_credentials())
        channel = grpc.secure_channel(f"xds:///{target}", creds)
    else:
        channel = grpc.insecure_channel(f"xds:///{target}")
    who = channel.unary_unary("/legate.test.Echo/Who")
    for line in sys.stdin:
        counts = {}
        for _ in range(int(line)):
            try:
                answer = who(b"", timeout=5, wait_for_ready=True).decode()
            except grpc.RpcError as e:
                # One failure ends the batch (each may take the whole timeout).
                answer = f"error: {e.code().name}: {e.details()}"
            counts[answer] = counts.get(answer, 0) + 1
            if answer.startswith("error"):
                break
        print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
