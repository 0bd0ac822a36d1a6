"""A minimal NATS client over a raw socket, for tests that play a peer the product
talks to through a real nats-server: a hostile or scripted worker of the NATS request
transport (doc/nats-request-transport.md), a spy on a subject.

It speaks the client protocol as documented (INFO, CONNECT with headers and
no_responders, SUB, PUB/HPUB, MSG/HMSG, PING/PONG): no dependency beyond the standard
library, and nothing of the product's own NATS code, so it checks the wire as
another implementation reads and writes it. Messages arrive on a reader thread into a
queue; `next()` takes them with a bounded wait. Thread-safety: one user thread.
"""
import json
import queue
import socket
import threading


class Msg:
    def __init__(self, subject, reply, headers, status, data):
        self.subject = subject
        self.reply = reply
        self.headers = headers  # {name: value}
        self.status = status    # the header block's status ("503" for no responders), or None
        self.data = data        # bytes

    def __repr__(self):
        return f"Msg({self.subject}, reply={self.reply}, headers={self.headers}, {self.data[:80]!r})"


class NatsPeer:
    def __init__(self, port, name="test-peer"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.msgs = queue.Queue()
        self.pongs = queue.Queue()
        self.errors = []
        self.next_sid = 0
        self.wlock = threading.Lock()
        line = self._readline()
        if not line.startswith(b"INFO "):
            raise AssertionError(f"nats-server did not greet with INFO: {line!r}")
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                   "protocol": 1, "name": name, "lang": "python-test", "version": "0"}
        self._send(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
        self.sock.settimeout(None)
        self.reader = threading.Thread(target=self._read_loop, daemon=True)
        self.reader.start()
        self.flush()

    # --- wire ---
    def _send(self, data):
        with self.wlock:
            self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("connection closed")
        self.buf += chunk

    def _readline(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _read_loop(self):
        try:
            while True:
                line = self._readline()
                if line.startswith(b"MSG "):
                    parts = line.split()
                    subject, reply = parts[1].decode(), (parts[3].decode() if len(parts) == 5 else None)
                    data = self._read_exact(int(parts[-1]) + 2)[:-2]
                    self.msgs.put(Msg(subject, reply, {}, None, data))
                elif line.startswith(b"HMSG "):
                    parts = line.split()
                    subject, reply = parts[1].decode(), (parts[3].decode() if len(parts) == 6 else None)
                    hlen, total = int(parts[-2]), int(parts[-1])
                    data = self._read_exact(total + 2)[:-2]
                    headers, status = self._parse_headers(data[:hlen])
                    self.msgs.put(Msg(subject, reply, headers, status, data[hlen:]))
                elif line == b"PING":
                    self._send(b"PONG\r\n")
                elif line == b"PONG":
                    self.pongs.put(True)
                elif line.startswith(b"-ERR"):
                    self.errors.append(line.decode(errors="replace"))
        except OSError:
            return

    @staticmethod
    def _parse_headers(block):
        lines = block.decode(errors="replace").split("\r\n")
        first = lines[0].split(None, 2)  # "NATS/1.0 [status [description]]"
        status = first[1] if len(first) > 1 else None
        headers = {}
        for h in lines[1:]:
            if ":" in h:
                k, v = h.split(":", 1)
                headers[k.strip()] = v.strip()
        return headers, status

    # --- API ---
    def sub(self, subject):
        self.next_sid += 1
        self._send(f"SUB {subject} {self.next_sid}\r\n".encode())
        return self.next_sid

    def pub(self, subject, data=b"", headers=None, reply=None):
        if isinstance(data, str):
            data = data.encode()
        target = subject + (" " + reply if reply else "")
        if headers:
            block = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"
            self._send(f"HPUB {target} {len(block)} {len(block) + len(data)}\r\n".encode() + block + data + b"\r\n")
        else:
            self._send(f"PUB {target} {len(data)}\r\n".encode() + data + b"\r\n")

    def flush(self, timeout=10):
        """Round trip to the server: everything sent before it was processed."""
        self._send(b"PING\r\n")
        self.pongs.get(timeout=timeout)

    def next(self, timeout=10):
        """The next message; raises queue.Empty after `timeout` seconds."""
        return self.msgs.get(timeout=timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
