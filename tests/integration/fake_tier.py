"""A scripted stand-in for one tier: a one-member replica set's primary speaking
OP_MSG on a loopback port, for what a `thermocline store` cannot be made to do.

- It fails chosen commands with chosen error codes (failures: {"find": [10107]}),
  as mongod's failCommand fail point would.
- It signs its $clusterTime with its own keyId and refuses (KeyNotFound 211, as a
  replica set with keyFile refuses a time it did not sign) a command carrying a
  $clusterTime signed with another keyId.
- Like mongod, it refuses a readConcern afterClusterTime beyond its own clock
  (InvalidOptions 72).
- It records every command it receives.
"""
import socket
import struct
import threading

import bson
from bson.int64 import Int64
from bson.timestamp import Timestamp

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013
INVALID_OPTIONS = 72
KEY_NOT_FOUND = 211


def parse_op_msg(message):
    """The body of an OP_MSG, with its document sequences merged in as arrays."""
    flags = struct.unpack_from("<I", message, 16)[0]
    end = len(message) - (4 if flags & 1 else 0)
    position = 20
    body, sequences = None, {}
    while position < end:
        kind = message[position]
        position += 1
        size = struct.unpack_from("<i", message, position)[0]
        if kind == 0:
            body = bson.decode(message[position:position + size])
        else:
            section = message[position + 4:position + size]
            name_end = section.index(b"\0")
            name = section[:name_end].decode()
            documents, offset = [], name_end + 1
            while offset < len(section):
                length = struct.unpack_from("<i", section, offset)[0]
                documents.append(bson.decode(section[offset:offset + length]))
                offset += length
            sequences[name] = documents
        position += size
    body.update(sequences)
    return body


def parse_op_query(message):
    """The command of a legacy OP_QUERY (what libmongoc's handshake sends)."""
    name_end = message.index(b"\0", 20)
    position = name_end + 1 + 8
    size = struct.unpack_from("<i", message, position)[0]
    return bson.decode(message[position:position + size])


def build_op_reply(document, response_to):
    payload = struct.pack("<iqii", 0, 0, 0, 1) + bson.encode(document)
    return struct.pack("<iiii", 16 + len(payload), 0, response_to, OP_REPLY) + payload


def build_op_msg(document, response_to):
    payload = struct.pack("<I", 0) + b"\0" + bson.encode(document)
    return struct.pack("<iiii", 16 + len(payload), 0, response_to, OP_MSG) + payload


class FakeTier:
    def __init__(self, key_id, set_name="rs0", seconds=1700000000):
        self.key_id = key_id
        self.set_name = set_name
        self.seconds = seconds
        self.increment = 0
        self.failures = {}
        self.documents = [{"_id": 1, "from": set_name}]
        self.commands = []
        self.refused = []
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.running = True
        self.connections = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def uri(self):
        return "mongodb://127.0.0.1:%d/?replicaSet=%s" % (self.port, self.set_name)

    def names(self):
        with self.lock:
            return [name for name, _ in self.commands]

    def received(self, name):
        with self.lock:
            return [command for command_name, command in self.commands if command_name == name]

    def cluster_time(self):
        """The current signed $clusterTime, advancing the clock."""
        with self.lock:
            self.increment += 1
            return {"clusterTime": Timestamp(self.seconds, self.increment),
                    "signature": {"hash": bson.Binary(bytes([self.key_id % 256]) * 20), "keyId": Int64(self.key_id)}}

    def close(self):
        self.running = False
        self.listener.close()
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
                connection.close()
            except OSError:
                pass

    # -- serving ------------------------------------------------------------
    def _accept(self):
        while self.running:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        try:
            while self.running:
                header = self._read(connection, 16)
                if header is None:
                    return
                length, request_id, _, opcode = struct.unpack("<iiii", header)
                rest = self._read(connection, length - 16)
                if rest is None or opcode not in (OP_MSG, OP_QUERY):
                    return
                if opcode == OP_QUERY:
                    connection.sendall(build_op_reply(self._answer(parse_op_query(header + rest)), request_id))
                else:
                    connection.sendall(build_op_msg(self._answer(parse_op_msg(header + rest)), request_id))
        except OSError:
            return
        finally:
            connection.close()

    @staticmethod
    def _read(connection, count):
        data = b""
        while len(data) < count:
            chunk = connection.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _answer(self, command):
        name = next(iter(command))
        with self.lock:
            self.commands.append((name, command))
            scripted = self.failures.get(name)
            code = scripted.pop(0) if scripted else None
        gossiped = command.get("$clusterTime")
        after = command.get("readConcern", {}).get("afterClusterTime")
        if gossiped is not None and gossiped["signature"]["keyId"] != self.key_id:
            with self.lock:
                self.refused.append(command)
            reply = {"ok": 0.0, "errmsg": "Cache Reader No keys found for HMAC that is valid for time: %s with id: %s"
                     % (gossiped["clusterTime"], gossiped["signature"]["keyId"]),
                     "code": KEY_NOT_FOUND, "codeName": "KeyNotFound"}
        elif after is not None and after > Timestamp(self.seconds, self.increment):
            with self.lock:
                self.refused.append(command)
            reply = {"ok": 0.0, "errmsg": "readConcern afterClusterTime value must not be greater than the current "
                     "clusterTime. Requested clusterTime: %s; current clusterTime: %s"
                     % (after, Timestamp(self.seconds, self.increment)),
                     "code": INVALID_OPTIONS, "codeName": "InvalidOptions"}
        elif code is not None:
            reply = {"ok": 0.0, "errmsg": "scripted failure", "code": code}
        else:
            reply = self._success(name, command)
        time = self.cluster_time()
        reply["$clusterTime"] = time
        reply["operationTime"] = time["clusterTime"]
        return reply

    def _success(self, name, command):
        me = "127.0.0.1:%d" % self.port
        if name in ("hello", "isMaster", "ismaster"):
            return {"isWritablePrimary": True, "ismaster": True, "setName": self.set_name, "hosts": [me],
                    "primary": me, "me": me, "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000,
                    "maxWriteBatchSize": 100000, "logicalSessionTimeoutMinutes": 30, "minWireVersion": 0,
                    "maxWireVersion": 17, "ok": 1.0}
        if name in ("find", "aggregate"):
            batch = self.documents if name == "find" else []
            return {"cursor": {"firstBatch": batch, "id": Int64(0),
                               "ns": "%s.%s" % (command["$db"], command[name])}, "ok": 1.0}
        if name == "insert":
            return {"n": len(command.get("documents", [])), "ok": 1.0}
        if name in ("update", "delete"):
            return {"n": 0, "nModified": 0, "ok": 1.0}
        return {"ok": 1.0}
