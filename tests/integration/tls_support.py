"""Certificates for the TLS tests (test_store_tls.py, test_proxy_tls.py), made
in the test with the openssl command: a CA, certificates it signs for servers
and clients, and a rogue CA nobody trusts. Each key and certificate share one
PEM file, as mongod and drivers take them."""

import ssl
import subprocess

import pytest

EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(*arguments, cwd):
    completed = subprocess.run(["openssl"] + list(arguments), cwd=str(cwd), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
    assert completed.returncode == 0, completed.stdout.decode("utf-8", "replace")


class Certificates:
    """A CA, a server certificate for localhost and 127.0.0.1, and a client
    certificate; a rogue CA and a client certificate it signed (mallory)."""

    def __init__(self, directory):
        self.directory = directory
        openssl("req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                "-subj", "/CN=thermocline test CA", cwd=directory)
        openssl("req", "-x509", *EC_KEY, "-keyout", "rogue.key", "-out", "rogue-ca.pem", "-days", "2",
                "-subj", "/CN=rogue CA", cwd=directory)
        self.ca = directory / "ca.pem"
        self.rogue_ca = directory / "rogue-ca.pem"
        self.server = self.issue("server", "/CN=localhost", "DNS:localhost,IP:127.0.0.1")
        self.client = self.issue("client", "/CN=test-client")
        self.mallory = self.issue("mallory", "/CN=mallory", ca="rogue")

    def issue(self, name, subject, alt_names=None, ca="ca"):
        """A certificate signed by ca ("ca" or "rogue") with its key, in NAME.pem;
        alt_names: a subjectAltName value such as "DNS:db.example,IP:10.0.0.1"."""
        directory = self.directory
        extension = []
        if alt_names:
            (directory / (name + ".ext")).write_text("subjectAltName=%s\n" % alt_names)
            extension = ["-extfile", name + ".ext"]
        authority = "ca" if ca == "ca" else "rogue-ca"
        openssl("req", *EC_KEY, "-keyout", name + ".key", "-out", name + ".csr", "-subj", subject, cwd=directory)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", authority + ".pem",
                "-CAkey", ("ca" if ca == "ca" else "rogue") + ".key", "-CAcreateserial", "-out", name + ".crt",
                "-days", "2", *extension, cwd=directory)
        pem = directory / (name + ".pem")
        pem.write_bytes((directory / (name + ".crt")).read_bytes() + (directory / (name + ".key")).read_bytes())
        return pem

    def client_context(self, certificate=None):
        context = ssl.create_default_context(cafile=str(self.ca))
        if certificate is not None:
            context.load_cert_chain(str(certificate))
        return context


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    return Certificates(tmp_path_factory.mktemp("pki"))
