"""TLS from `cinfer gateway` to the replicas' gRPC ports (upstream_tls, the HTTP upstream's
settings, ALPN h2), optionally mutual, as a table of cases (tests as data) against real
replicas with tritonclient.grpc through the gateway: each row says what the replica serves,
what the gateway presents and trusts, and how a call must end. A misconfigured row is a clean
UNAVAILABLE naming the reason (and a warning in the gateway's log); the replica is unharmed
and still answers a correct TLS client directly. Certificates are made at test time."""
import os
import shutil

import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo
from test_gateway_common import Gateway, wait_for
from test_security import make_certs


@pytest.fixture(scope="module")
def certs():
    d = make_certs()
    yield d
    shutil.rmtree(d)


def replica(d, grpc_tls, mutual=False):
    """HTTPS on the HTTP port (the gateway's health checks and model lists use the HTTP
    upstream TLS); the gRPC port plaintext, TLS or mutual TLS."""
    args = ["--model-control-mode", "explicit", "--load-model", "identity",
            "--tls-cert", os.path.join(d, "srv.pem"), "--tls-key", os.path.join(d, "srv.key")]
    if grpc_tls:
        args += ["--grpc-use-ssl", "true", "--grpc-server-cert", os.path.join(d, "srv.pem"),
                 "--grpc-server-key", os.path.join(d, "srv.key"),
                 "--grpc-root-cert", os.path.join(d, "ca.pem")]
    if mutual:
        args += ["--grpc-use-ssl-mutual", "true"]
    return Server(copy_repo(["identity"]), args)


def gateway(d, r, ca, client_cert):
    up = {"ca_file": os.path.join(d, ca)}
    if client_cert:
        up.update(cert_file=os.path.join(d, "client.pem"), key_file=os.path.join(d, "client.key"))
    cfg = {"health": {"interval_ms": 100, "timeout_ms": 100, "healthy_threshold": 1,
                      "unhealthy_threshold": 1},
           "upstreams": {"models_interval_ms": 200,
                         "static": [{"address": f"127.0.0.1:{r.port}", "grpc_port": r.grpc_port}]},
           "upstream_tls": up}
    return Gateway(cfg, args=["--grpc-port", "0"])


def infer(url, **tls):
    c = tg.InferenceServerClient(url, **tls)
    try:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        i = tg.InferInput("INPUT0", [1, 4], "FP32")
        i.set_data_from_numpy(x)
        assert np.array_equal(c.infer("identity", [i], client_timeout=60).as_numpy("OUTPUT0"), x)
    finally:
        c.close()


def read(d, name):
    with open(os.path.join(d, name), "rb") as f:
        return f.read()


# (id, replica gRPC: None | "tls" | "mutual", gateway's CA file, gateway presents a client
#  certificate, expected: "ok" or (replica healthy?, gRPC status, text in its message, text
#  in the gateway log))
ROWS = [
    ("tls", "tls", "ca.pem", False, "ok"),
    ("mutual", "mutual", "ca.pem", True, "ok"),
    ("client-cert-not-asked-for", "tls", "ca.pem", True, "ok"),
    ("mutual-without-client-cert", "mutual", "ca.pem", False,
     (True, "UNAVAILABLE", "TLS: ", "gateway: grpc upstream")),
    ("plaintext-replica-behind-tls-upstream", None, "ca.pem", False,
     (True, "UNAVAILABLE", "TLS handshake failed", "gateway: grpc upstream")),
    # the wrong CA fails the HTTP health checks too: the replica is never used (as for HTTP)
    ("wrong-ca", "tls", "other.pem", True,
     (False, "NOT_FOUND", "no replica serves model 'identity'", "certificate")),
]


@pytest.mark.parametrize("rid,rtls,ca,client_cert,want", ROWS, ids=[r[0] for r in ROWS])
def test_upstream_grpc_tls_table(certs, rid, rtls, ca, client_cert, want):
    with replica(certs, rtls is not None, rtls == "mutual") as r:
        with gateway(certs, r, ca, client_cert) as gw:
            url = f"127.0.0.1:{gw.grpc_port}"
            healthy = want == "ok" or want[0]
            state = "healthy" if healthy else "unhealthy"
            wait_for(lambda: (gw.replica(f"127.0.0.1:{r.port}") or {}).get("state") == state,
                     30, f"replica {state}")
            if healthy:
                wait_for(lambda: "identity" in gw.replica(f"127.0.0.1:{r.port}").get("models", []),
                         30, "the replica's models")
            if want == "ok":
                infer(url)
                infer(url)  # the TLS connection is reused
            else:
                with pytest.raises(InferenceServerException) as e:
                    infer(url)
                assert e.value.status() == "StatusCode." + want[1], (e.value.status(), e.value.message())
                assert want[2] in e.value.message(), e.value.message()
                wait_for(lambda: any(want[3] in ln for ln in gw.log), 30, "the reason in the log")
            # the replica is unharmed: a correct TLS client still gets answers directly
            direct = {}
            if rtls:
                direct = {"ssl": True, "root_certificates": os.path.join(certs, "ca.pem")}
                if rtls == "mutual":
                    direct.update(private_key=os.path.join(certs, "client.key"),
                                  certificate_chain=os.path.join(certs, "client.pem"))
            infer(f"127.0.0.1:{r.grpc_port}", **direct)
