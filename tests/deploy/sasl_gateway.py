"""A TLS + SASL front door for the embedded broker, so the security wiring is tested end to end.

The embedded broker (Tansu) speaks plain Kafka only. This gateway listens with TLS, answers the
SASL exchange itself — PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 as RFC 4616 / RFC 5802 define them,
checking the client's proof against a password it knows — and only after a successful login pipes
the connection to the broker, which advertises the gateway's address. A client that skips TLS,
SASL, or sends a wrong password gets no Kafka request through. Every login is recorded with the
client id of the connection, so a test can tell Faust's clients from Lockstep's own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import ssl
import struct
from dataclasses import dataclass, field

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE = 58, 33, 34
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass
class Login:
    client_id: str
    mechanism: str
    user: str
    ok: bool


@dataclass
class SaslGateway:
    upstream: tuple[str, int]
    user: str
    password: str
    certfile: str
    keyfile: str
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    host: str = "127.0.0.1"
    port: int = 0
    logins: list[Login] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    _server: asyncio.AbstractServer | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.certfile, self.keyfile)
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=ctx)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_writer = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            if await self._authenticate(reader, writer, up_reader, up_writer):
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, up_writer):
                if w is not None:
                    w.close()

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> bool:
        mechanism: str | None = None
        scram: _ScramServer | None = None
        while True:
            frame = await _read_frame(reader)
            api_key, version, correlation, client_id, body = _parse_request(frame)
            if api_key == API_VERSIONS:  # allowed before login, answered by the broker
                up_writer.write(struct.pack(">i", len(frame)) + frame)
                await up_writer.drain()
                response = await _read_frame(up_reader)
                writer.write(struct.pack(">i", len(response)) + response)
                await writer.drain()
            elif api_key == SASL_HANDSHAKE:
                (requested,) = _strings(body, 1)
                error = 0 if requested in self.mechanisms else UNSUPPORTED_SASL_MECHANISM
                mechanism = requested if error == 0 else None
                payload = struct.pack(">hi", error, len(self.mechanisms)) + b"".join(
                    _string(m) for m in self.mechanisms)
                await _respond(writer, correlation, payload)
                if error:
                    self.refused.append(f"{client_id}: mechanism {requested}")
                    return False
            elif api_key == SASL_AUTHENTICATE and mechanism is not None:
                (size,) = struct.unpack_from(">i", body)
                token = body[4:4 + size]
                if mechanism == "PLAIN":
                    _, user, password = token.split(b"\0")
                    ok = user.decode() == self.user and hmac.compare_digest(password, self.password.encode())
                    self.logins.append(Login(client_id, mechanism, user.decode(), ok))
                    await _respond_auth(writer, correlation, version, ok, b"")
                    return ok
                if scram is None:
                    scram = _ScramServer(HASHES[mechanism], self.user, self.password)
                    await _respond_auth(writer, correlation, version, True, scram.first(token))
                    continue
                final = scram.final(token)
                self.logins.append(Login(client_id, mechanism, scram.user, final is not None))
                await _respond_auth(writer, correlation, version, final is not None, final or b"")
                return final is not None
            else:
                self.refused.append(f"{client_id}: api {api_key} before login")
                return False


class _ScramServer:
    """The server side of SCRAM (RFC 5802), no channel binding."""

    def __init__(self, algorithm: str, user: str, password: str) -> None:
        self.algorithm, self.expected_user = algorithm, user
        self.salt, self.iterations = os.urandom(16), 4096
        self.salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), self.salt, self.iterations)
        self.user = ""

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.algorithm).digest()

    def first(self, client_first: bytes) -> bytes:
        bare = client_first.decode().split(",", 2)[2]  # after the GS2 header "n,,"
        attrs = dict(kv.split("=", 1) for kv in bare.split(","))
        self.user, self.client_bare = attrs["n"], bare
        self.nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
        self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"
        return self.server_first.encode()

    def final(self, client_final: bytes) -> bytes | None:
        text = client_final.decode()
        without_proof, _, proof = text.rpartition(",p=")
        attrs = dict(kv.split("=", 1) for kv in without_proof.split(","))
        if attrs.get("r") != self.nonce or self.user != self.expected_user:
            return None
        auth_message = f"{self.client_bare},{self.server_first},{without_proof}".encode()
        client_key = self._hmac(self.salted, b"Client Key")
        stored_key = hashlib.new(self.algorithm, client_key).digest()
        signature = self._hmac(stored_key, auth_message)
        expected = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        if not hmac.compare_digest(expected, base64.b64decode(proof)):
            return None
        server_signature = self._hmac(self._hmac(self.salted, b"Server Key"), auth_message)
        return b"v=" + base64.b64encode(server_signature)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def _parse_request(frame: bytes) -> tuple[int, int, int, str, bytes]:
    api_key, version, correlation, id_len = struct.unpack_from(">hhih", frame)
    offset = 10 + max(id_len, 0)
    client_id = frame[10:offset].decode() if id_len >= 0 else ""
    return api_key, version, correlation, client_id, frame[offset:]


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _strings(body: bytes, count: int) -> list[str]:
    out, offset = [], 0
    for _ in range(count):
        (size,) = struct.unpack_from(">h", body, offset)
        out.append(body[offset + 2:offset + 2 + size].decode())
        offset += 2 + size
    return out


async def _respond(writer: asyncio.StreamWriter, correlation: int, payload: bytes) -> None:
    message = struct.pack(">i", correlation) + payload
    writer.write(struct.pack(">i", len(message)) + message)
    await writer.drain()


async def _respond_auth(writer: asyncio.StreamWriter, correlation: int, version: int, ok: bool,
                        token: bytes) -> None:
    error = 0 if ok else SASL_AUTHENTICATION_FAILED
    message = struct.pack(">hh", error, -1) if ok else struct.pack(">h", error) + _string("authentication failed")
    payload = message + struct.pack(">i", len(token)) + token
    if version >= 1:
        payload += struct.pack(">q", 0)
    await _respond(writer, correlation, payload)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.close()
