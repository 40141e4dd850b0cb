"""A scripted stand-in for one tier: a one-member replica set's primary speaking
OP_MSG on a loopback port, for what a `thermocline store` cannot be made to do;
or, with FakeReplicaSet, a primary and secondaries (a store cannot be a secondary).

- It fails chosen commands with chosen error codes (failures: {"find": [10107]}),
  as mongod's failCommand fail point would, or closes the connection instead of
  answering them (hang_ups: {"find": 1}, a network error).
- It signs its $clusterTime with its own keyId and refuses (KeyNotFound 211, as a
  replica set with keyFile refuses a time it did not sign) a command carrying a
  $clusterTime signed with another keyId.
- Like mongod, it refuses a readConcern afterClusterTime beyond its own clock
  (InvalidOptions 72).
- It records every command it receives.
- find honours batchSize with a cursor that getMore and killCursors go on with.
- As a member of a FakeReplicaSet, its hello says what it is (primary or
  secondary, tags, a lastWrite `lag_seconds` behind and, when `applied_time` is
  set, its opTime, after `hello_delay` seconds),
  and a secondary refuses reads without a $readPreference that allows it
  (NotPrimaryNoSecondaryOk 13435), as mongod does.

MemberRelay makes a real `thermocline store` look like a replica set member
(with its users, its SCRAM, and TLS in front), for what a script cannot fake.
"""
import datetime
import itertools
import socket
import ssl
import struct
import threading
import time

import bson
from bson.int64 import Int64
from bson.timestamp import Timestamp

OP_REPLY = 1
OP_QUERY = 2004
OP_MSG = 2013
INVALID_OPTIONS = 72
KEY_NOT_FOUND = 211
CURSOR_NOT_FOUND = 43
NOT_PRIMARY_NO_SECONDARY_OK = 13435
READ_COMMANDS = ("find", "aggregate", "count", "distinct")


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


def build_message(opcode, payload, response_to):
    return struct.pack("<iiii", 16 + len(payload), 0, response_to, opcode) + payload


def build_op_reply(document, response_to):
    return build_message(OP_REPLY, struct.pack("<iqii", 0, 0, 0, 1) + bson.encode(document), response_to)


def build_op_msg(document, response_to):
    return build_message(OP_MSG, struct.pack("<I", 0) + b"\0" + bson.encode(document), response_to)


def read_exactly(connection, count):
    """count bytes from connection, or None once it closed."""
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class LoopbackServer:
    """A listener on a free loopback port; each connection it accepts is served by
    _serve(connection) in a thread of its own, until close()."""

    def __init__(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.running = True
        self.connections = []  # closed by close(); _serve may add its own
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def close(self):
        self.running = False
        self.listener.close()
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
                connection.close()
            except OSError:
                pass

    def _accept(self):
        while self.running:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        raise NotImplementedError


class FakeTier(LoopbackServer):
    _cursor_ids = itertools.count(1000)

    def __init__(self, key_id, set_name="rs0", seconds=1700000000, secondary=False, tags=None, lag_seconds=0,
                 hello_delay=0):
        self.key_id = key_id
        self.set_name = set_name
        self.seconds = seconds
        self.increment = 0
        self.failures = {}
        self.hang_ups = {}
        self.documents = [{"_id": 1, "from": set_name}]
        self.collections = {}  # collection name -> its documents, instead of `documents`
        self.secondary = secondary
        self.tags = tags or {}
        self.lag_seconds = lag_seconds
        self.applied_time = None  # a Timestamp: hello's lastWrite.opTime.ts
        self.hello_delay = hello_delay
        self.hosts = None  # the set's members; None: only this one
        self.primary_address = None
        self.cursors = {}
        self.commands = []
        self.refused = []
        self.lock = threading.Lock()
        super().__init__()

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

    # -- serving ------------------------------------------------------------
    def _serve(self, connection):
        try:
            while self.running:
                header = read_exactly(connection, 16)
                if header is None:
                    return
                length, request_id, _, opcode = struct.unpack("<iiii", header)
                rest = read_exactly(connection, length - 16)
                if rest is None or opcode not in (OP_MSG, OP_QUERY):
                    return
                if opcode == OP_QUERY:
                    connection.sendall(build_op_reply(self._answer(parse_op_query(header + rest)), request_id))
                    continue
                command = parse_op_msg(header + rest)
                with self.lock:
                    hang_up = self.hang_ups.get(next(iter(command)), 0) > 0
                    if hang_up:
                        self.hang_ups[next(iter(command))] -= 1
                        self.commands.append((next(iter(command)), command))
                if hang_up:
                    return
                connection.sendall(build_op_msg(self._answer(command), request_id))
        except OSError:
            return
        finally:
            connection.close()

    def _answer(self, command):
        name = next(iter(command))
        if name in ("hello", "isMaster", "ismaster") and self.hello_delay:
            time.sleep(self.hello_delay)
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
        elif self.secondary and name in READ_COMMANDS and \
                command.get("$readPreference", {}).get("mode", "primary") == "primary":
            reply = {"ok": 0.0, "errmsg": "not primary and secondaryOk=false", "code": NOT_PRIMARY_NO_SECONDARY_OK,
                     "codeName": "NotPrimaryNoSecondaryOk"}
        else:
            reply = self._success(name, command)
        signed = self.cluster_time()
        reply["$clusterTime"] = signed
        reply["operationTime"] = signed["clusterTime"]
        return reply

    def _hello(self):
        me = self.address
        reply = {"isWritablePrimary": not self.secondary, "ismaster": not self.secondary, "setName": self.set_name,
                 "hosts": self.hosts or [me], "primary": self.primary_address or me, "me": me,
                 "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000, "maxWriteBatchSize": 100000,
                 "logicalSessionTimeoutMinutes": 30, "minWireVersion": 0, "maxWireVersion": 17, "ok": 1.0}
        if self.secondary:
            reply["secondary"] = True
        if self.tags:
            reply["tags"] = self.tags
        if self.hosts is not None:
            written = datetime.datetime.utcnow() - datetime.timedelta(seconds=self.lag_seconds)
            reply["lastWrite"] = {"lastWriteDate": written.replace(microsecond=written.microsecond // 1000 * 1000)}
            if self.applied_time is not None:
                reply["lastWrite"]["opTime"] = {"ts": self.applied_time, "t": Int64(1)}
        return reply

    def _cursor_reply(self, command, documents, batch_size, field, cursor_id=None):
        """A batch of documents and, when more remain, the cursor (cursor_id, or a new
        one) getMore goes on with."""
        collection = command.get("collection", command.get("find"))
        if not batch_size or len(documents) <= batch_size:
            cursor_id = 0
        else:
            cursor_id = cursor_id or next(self._cursor_ids)
            with self.lock:
                self.cursors[cursor_id] = documents[batch_size:]
            documents = documents[:batch_size]
        return {"cursor": {field: documents, "id": Int64(cursor_id), "ns": "%s.%s" % (command["$db"], collection)},
                "ok": 1.0}

    def _success(self, name, command):
        if name in ("hello", "isMaster", "ismaster"):
            return self._hello()
        if name == "find":
            documents = list(self.collections.get(command["find"], self.documents))
            return self._cursor_reply(command, documents, command.get("batchSize"), "firstBatch")
        if name == "getMore":
            with self.lock:
                remaining = self.cursors.pop(command["getMore"], None)
            if remaining is None:
                return {"ok": 0.0, "errmsg": "cursor id %d not found" % command["getMore"], "code": CURSOR_NOT_FOUND,
                        "codeName": "CursorNotFound"}
            return self._cursor_reply(command, remaining, command.get("batchSize"), "nextBatch", command["getMore"])
        if name == "killCursors":
            with self.lock:
                killed = [cursor for cursor in command["cursors"] if self.cursors.pop(cursor, None) is not None]
            return {"cursorsKilled": killed, "cursorsNotFound": [], "cursorsAlive": [], "cursorsUnknown": [],
                    "ok": 1.0}
        if name == "aggregate":
            return {"cursor": {"firstBatch": [], "id": Int64(0),
                               "ns": "%s.%s" % (command["$db"], command[name])}, "ok": 1.0}
        if name == "insert":
            return {"n": len(command.get("documents", [])), "ok": 1.0}
        if name in ("update", "delete"):
            return {"n": 0, "nModified": 0, "ok": 1.0}
        return {"ok": 1.0}


class FakeReplicaSet:
    """A primary and secondaries of one set, each a FakeTier whose documents say
    which member served them ({"_id": i, "member": name}). secondaries: one
    {"tags": ..., "lag_seconds": ...} per secondary, named secondary0, secondary1..."""

    def __init__(self, set_name, key_id, secondaries, documents=5, primary_hello_delay=0, seconds=1700000000):
        self.primary = FakeTier(key_id, set_name, seconds=seconds, tags={"role": "primary"},
                                hello_delay=primary_hello_delay)
        self.secondaries = [FakeTier(key_id, set_name, seconds=seconds, secondary=True, tags=options.get("tags"),
                                     lag_seconds=options.get("lag_seconds", 0)) for options in secondaries]
        self.names = {}
        for index, member in enumerate(self.members):
            name = "primary" if index == 0 else "secondary%d" % (index - 1)
            self.names[name] = member
            member.documents = [{"_id": i, "member": name} for i in range(documents)]
            member.hosts = [each.address for each in self.members]
            member.primary_address = self.primary.address

    @property
    def members(self):
        return [self.primary] + self.secondaries

    @property
    def uri(self):
        return self.primary.uri

    def served(self, command_name, collection=None):
        """The names of the members that received command_name (on collection), each once."""
        return sorted(name for name, member in self.names.items()
                      if any(collection in (None, command[command_name]) for command in member.received(command_name)))

    def close(self):
        for member in self.members:
            member.close()


class MemberRelay(LoopbackServer):
    """A replica set member made of a real server: each message goes to a
    `thermocline store` and its reply comes back, but hello replies are rewritten
    so that the store answers as the primary or a secondary of set_name with the
    relays' hosts (a store cannot be a secondary). Everything else, SCRAM
    included, passes untouched. With server_context (an ssl.SSLContext), clients
    reach it over TLS, its certificate checked by them. Records command names."""

    def __init__(self, target_port, set_name, secondary, server_context=None):
        self.target_port = target_port
        self.set_name = set_name
        self.secondary = secondary
        self.server_context = server_context
        self.hosts = []
        self.primary_address = None
        self.commands = []
        self.lock = threading.Lock()
        super().__init__()

    def names(self):
        with self.lock:
            return list(self.commands)

    def _serve(self, connection):
        upstream = None
        try:
            if self.server_context is not None:
                connection = self.server_context.wrap_socket(connection, server_side=True)
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.connections.append(upstream)
            while self.running:
                request = self._message(connection)
                if request is None:
                    return
                name = None
                if struct.unpack_from("<i", request, 12)[0] == OP_MSG:
                    name = next(iter(parse_op_msg(request)))
                    with self.lock:
                        self.commands.append(name)
                upstream.sendall(request)
                reply = self._message(upstream)
                if reply is None:
                    return
                if name in ("hello", "isMaster", "ismaster"):
                    reply = build_op_msg(self._rewrite(parse_op_msg(reply)), struct.unpack_from("<i", request, 4)[0])
                connection.sendall(reply)
        except (OSError, ssl.SSLError):
            return
        finally:
            connection.close()
            if upstream is not None:
                upstream.close()

    def _rewrite(self, hello):
        hello.update({"isWritablePrimary": not self.secondary, "ismaster": not self.secondary,
                      "setName": self.set_name, "hosts": self.hosts, "me": self.address,
                      "primary": self.primary_address})
        hello.pop("secondary", None)
        if self.secondary:
            hello["secondary"] = True
        return hello

    @staticmethod
    def _message(connection):
        header = read_exactly(connection, 4)
        if header is None:
            return None
        rest = read_exactly(connection, struct.unpack("<i", header)[0] - 4)
        return None if rest is None else header + rest
