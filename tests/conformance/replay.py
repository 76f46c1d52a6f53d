#!/usr/bin/env python3
# Vendored verbatim (apart from this comment) from the kube-apiserver conformance transcripts' reference
# replayer, which ships with the recording of kube-apiserver v1.36.2 (gitVersion v1.36.2, feature gates
# GenericWorkload, GangScheduling, DRAListTypeAttributes, DRAWorkloadResourceClaims) whose cases are in
# cases/. Keep it byte-identical to that recording's replay.py below this comment, so a re-recording
# can be dropped in; tests/conformance/test_conformance.py checks it when the recording is at hand.
"""Reference replayer for the recorded conformance cases (stdlib only).

Runs the steps of a case, in order, against a server (an emulator, or a real kube-apiserver for a
self-check) and returns the mismatches according to the comparison rules in README.md.

    python3 replay.py --server http://127.0.0.1:8001 cases/*.json
    python3 replay.py --server https://127.0.0.1:17443 --ca ca.crt --cert admin.crt --key admin.key \
        --with-fixtures cases/*.json

As a library (e.g. from a pytest test of the emulator):

    from replay import HttpSender, load_case, replay_case
    result = replay_case(load_case("cases/conflict.json"), HttpSender("http://127.0.0.1:8001"))
    assert not result.failures, "\\n".join(result.failures)

Placeholders in recorded requests (<uid:N>, <rv:N>, <name:N>, <continue:N>) are substituted with
the values the server under test returned at the same place in earlier responses: responses are
aligned with the recording, and every placeholder met there is bound to the actual value (a
placeholder bound twice to different values is a failure: e.g. a no-op patch must not change the
resourceVersion). <time> in a request becomes the current time (RFC 3339, 6 fractional digits).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import http.client
import json
import re
import ssl
import sys
import threading
import urllib.parse

PH_RE = re.compile(r"<(?:uid|rv|name|continue):\d+>")
TOKEN_RE = re.compile(r"<(?:uid|rv|name|continue)(?::\d+)?>|<time>|<age>|<address>")
TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
DISCOVERY_KINDS = {"APIResourceList", "APIGroupList", "APIVersions", "APIGroup",
                   "APIGroupDiscoveryList"}


def load_case(path):
    with open(path) as f:
        return json.load(f)


class HttpSender:
    """send(method, path, query, headers, body, watch) -> (status, headers, body)."""

    def __init__(self, server, ca=None, cert=None, key=None, timeout=60.0):
        u = urllib.parse.urlsplit(server)
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.timeout = timeout
        self.ctx = None
        if self.https:
            self.ctx = ssl.create_default_context(cafile=ca)
            if not ca:
                self.ctx.check_hostname = False
                self.ctx.verify_mode = ssl.CERT_NONE
            if cert:
                self.ctx.load_cert_chain(cert, key)

    def __call__(self, method, path, query, headers, body, watch):
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        if self.https:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                               timeout=self.timeout)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, url, body=data, headers=dict(headers or {}))
            resp = conn.getresponse()
            raw = resp.read().decode("utf-8", "replace")
            hdrs = {}
            for k, v in resp.getheaders():
                k = k.lower()
                if k == "warning":
                    hdrs.setdefault(k, []).append(v)
                else:
                    hdrs[k] = v
        finally:
            conn.close()
        parsed = raw
        if watch and resp.status == 200:
            parsed = [json.loads(line) for line in raw.splitlines() if line.strip()]
        elif "json" in hdrs.get("content-type", ""):
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                pass
        return resp.status, hdrs, parsed


class Result:
    def __init__(self):
        self.failures: list[str] = []
        self.informative: list[str] = []
        self.skipped: list[int] = []


class Replayer:
    def __init__(self, send, with_fixtures=False, strict_messages=False):
        self.send = send
        self.with_fixtures = with_fixtures
        self.strict_messages = strict_messages
        self.bind: dict[str, str] = {}

    # ---------------------------------------------------------------- request substitution
    def subst(self, v, index=None):
        if isinstance(v, dict):
            return {k: self.subst(x, index) for k, x in v.items()}
        if isinstance(v, list):
            return [self.subst(x, index) for x in v]
        if isinstance(v, str):
            def one(m):
                p = m.group(0)
                if p not in self.bind:
                    raise KeyError(f"placeholder {p} is not bound by an earlier response")
                return self.bind[p]
            v = PH_RE.sub(one, v)
            if "<time>" in v:
                now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                v = v.replace("<time>", now)
            if index is not None:
                v = v.replace("<i>", str(index))
            return v
        return v

    # ---------------------------------------------------------------- matching helpers
    def match_str(self, rec, act, path, out, soft=False):
        """Match a recorded string (maybe with placeholders) against an actual value."""
        if not TOKEN_RE.search(rec):
            if rec != act:
                out.append(f"{path}: expected {rec!r}, got {act!r}")
            return
        if not isinstance(act, str):
            out.append(f"{path}: expected a string like {rec!r}, got {act!r}")
            return
        if rec == "<time>":
            if not TIME_RE.match(act):
                out.append(f"{path}: expected a timestamp, got {act!r}")
            return
        parts, names = [], []
        pos = 0
        for m in TOKEN_RE.finditer(rec):
            parts.append(re.escape(rec[pos:m.start()]))
            tok = m.group(0)
            if not PH_RE.fullmatch(tok):  # <time>, <age>, <address>, unnumbered fixture values
                parts.append(".+?" if tok != "<time>" else r"\S+?")
                names.append(None)
            else:
                parts.append("(.+?)")
                names.append(tok)
            pos = m.end()
        parts.append(re.escape(rec[pos:]))
        m = re.fullmatch("".join(parts), act, re.S)
        if not m:
            out.append(f"{path}: expected {rec!r}, got {act!r}")
            return
        gi = 0
        for name in names:
            if name is None:
                continue
            gi += 1
            val = m.group(gi)
            if name not in self.bind:
                kind = name[1:name.index(":")]
                other = [p for p, v in self.bind.items() if v == val and p.startswith(f"<{kind}:")]
                if other and not soft:
                    out.append(f"{path}: expected a new value ({name}), got {val!r} which was "
                               f"already seen as {other[0]}")
                self.bind[name] = val
            elif self.bind[name] != val and not soft:
                out.append(f"{path}: {name} was {self.bind[name]!r} earlier, now {val!r}")

    def deep(self, rec, act, path, out, soft_rv=False):
        if isinstance(rec, dict):
            if not isinstance(act, dict):
                out.append(f"{path}: expected an object, got {type(act).__name__}")
                return
            missing = [k for k in rec if k not in act]
            extra = [k for k in act if k not in rec and k != "managedFields"]
            if missing:
                out.append(f"{path}: missing keys {missing}")
            if extra:
                out.append(f"{path}: unexpected keys {extra}")
            for k in rec:
                if k in act:
                    self.deep(rec[k], act[k], f"{path}.{k}", out, soft_rv)
            return
        if isinstance(rec, list):
            if not isinstance(act, list):
                out.append(f"{path}: expected a list, got {type(act).__name__}")
                return
            if len(rec) != len(act):
                out.append(f"{path}: expected {len(rec)} items, got {len(act)}")
            for i, (r, a) in enumerate(zip(rec, act)):
                self.deep(r, a, f"{path}[{i}]", out, soft_rv)
            return
        if isinstance(rec, str):
            self.match_str(rec, act, path, out, soft=soft_rv and path.endswith("resourceVersion"))
            return
        if rec != act:
            out.append(f"{path}: expected {rec!r}, got {act!r}")

    def bind_only(self, rec, act):
        """Bind placeholders found anywhere in rec to the aligned values in act (lenient)."""
        if isinstance(rec, dict) and isinstance(act, dict):
            for k, v in rec.items():
                if k in act:
                    self.bind_only(v, act[k])
        elif isinstance(rec, list) and isinstance(act, list):
            for r, a in zip(rec, act):
                self.bind_only(r, a)
        elif isinstance(rec, str) and isinstance(act, str) and PH_RE.search(rec):
            tmp: list[str] = []
            self.match_str(rec, act, "", tmp, soft=True)

    # ---------------------------------------------------------------- comparison rules
    def compare_object(self, rec, act, path, out):
        if not isinstance(act, dict):
            out.append(f"{path}: expected an object, got {act!r:.200}")
            return
        for k in ("kind", "apiVersion"):
            if k in rec and rec.get(k) != act.get(k):
                out.append(f"{path}.{k}: expected {rec.get(k)!r}, got {act.get(k)!r}")
        rm, am = rec.get("metadata") or {}, act.get("metadata") or {}
        rkeys = set(rm) - {"managedFields"}
        akeys = set(am) - {"managedFields"}
        if rkeys != akeys:
            out.append(f"{path}.metadata: keys differ: missing {sorted(rkeys - akeys)}, "
                       f"unexpected {sorted(akeys - rkeys)}")
        for k in ("name", "generateName", "namespace", "uid", "resourceVersion", "generation",
                  "labels", "annotations", "finalizers", "deletionGracePeriodSeconds",
                  "ownerReferences", "creationTimestamp", "deletionTimestamp"):
            if k in rm and k in am:
                self.deep(rm[k], am[k], f"{path}.metadata.{k}", out)
        for k in ("spec", "status"):
            if k in rec or k in act:
                if k not in rec or k not in act:
                    out.append(f"{path}.{k}: present in {'recording' if k in rec else 'reply'} "
                               f"only")
                else:
                    self.deep(rec[k], act[k], f"{path}.{k}", out)
        # other top-level fields (Event, Binding target, DeviceClass...) compared as a whole
        for k in rec:
            if k not in ("kind", "apiVersion", "metadata", "spec", "status"):
                if k not in act:
                    out.append(f"{path}.{k}: missing")
                else:
                    self.deep(rec[k], act[k], f"{path}.{k}", out)

    def compare_status(self, rec, act, path, out):
        if not isinstance(act, dict) or act.get("kind") != "Status":
            out.append(f"{path}: expected a Status, got {str(act)[:200]}")
            return
        for k in ("status", "reason", "code"):
            if rec.get(k) != act.get(k):
                out.append(f"{path}.{k}: expected {rec.get(k)!r}, got {act.get(k)!r}")
        rd, ad = rec.get("details") or {}, act.get("details") or {}
        for k in ("kind", "group", "name"):
            if k in rd or k in ad:
                if k not in rd or k not in ad:
                    out.append(f"{path}.details.{k}: expected {rd.get(k)!r}, got {ad.get(k)!r}")
                else:
                    self.deep(rd[k], ad[k], f"{path}.details.{k}", out)
        rc = sorted({(c.get("field"), c.get("reason")) for c in rd.get("causes") or []},
                    key=str)
        ac = sorted({(c.get("field"), c.get("reason")) for c in ad.get("causes") or []},
                    key=str)
        if rc != ac:
            out.append(f"{path}.details.causes (field, reason): expected {rc}, got {ac}")
        if self.strict_messages and "message" in rec:
            self.deep(rec["message"], act.get("message"), f"{path}.message", out)
        else:
            self.bind_only(rec.get("message"), act.get("message"))

    def compare_body(self, rec, act, path, out):
        if isinstance(rec, list):  # watch events
            if not isinstance(act, list):
                out.append(f"{path}: expected a watch event stream, got {str(act)[:200]}")
                return
            r = [e for e in rec if e.get("type") != "BOOKMARK"]
            a = [e for e in act if e.get("type") != "BOOKMARK"]
            rt = [(e["type"], (e["object"].get("metadata") or {}).get("name")) for e in r]
            at = [(e.get("type"), ((e.get("object") or {}).get("metadata") or {}).get("name"))
                  for e in a]
            if [t for t, _ in rt] != [t for t, _ in at]:
                out.append(f"{path}: event types expected {rt}, got {at}")
            for i, (re_, ae) in enumerate(zip(r, a)):
                self.compare_body(re_["object"], ae.get("object"), f"{path}[{i}].object", out)
            for e in act:
                if e.get("type") == "BOOKMARK":
                    obj = e.get("object") or {}
                    if not (obj.get("metadata") or {}).get("resourceVersion"):
                        out.append(f"{path}: BOOKMARK without metadata.resourceVersion")
            return
        if not isinstance(rec, dict):
            return  # text bodies: status code only
        kind = rec.get("kind")
        if kind == "Status":
            self.compare_status(rec, act, path, out)
        elif kind in DISCOVERY_KINDS:
            self.compare_discovery(rec, act, path, out)
        elif kind == "Table":
            self.compare_table(rec, act, path, out)
        elif isinstance(rec.get("items"), list):
            if not isinstance(act, dict) or not isinstance(act.get("items"), list):
                out.append(f"{path}: expected a list object, got {str(act)[:200]}")
                return
            if rec.get("kind") != act.get("kind"):
                out.append(f"{path}.kind: expected {rec.get('kind')!r}, got {act.get('kind')!r}")
            self.deep(rec.get("metadata", {}).get("continue", ""),
                      (act.get("metadata") or {}).get("continue", ""), f"{path}.metadata.continue",
                      out)
            self.bind_only(rec.get("metadata"), act.get("metadata"))
            rn = [(i.get("metadata") or {}).get("name") for i in rec["items"]]
            an = [(i.get("metadata") or {}).get("name") for i in act["items"]]
            if len(rn) != len(an):
                out.append(f"{path}.items: expected {rn}, got {an}")
            for i, (ri, ai) in enumerate(zip(rec["items"], act["items"])):
                self.compare_object(ri, ai, f"{path}.items[{i}]", out)
        elif "metadata" in rec:
            self.compare_object(rec, act, path, out)
        else:  # e.g. /version
            self.bind_only(rec, act)

    def compare_discovery(self, rec, act, path, out):
        if not isinstance(act, dict) or act.get("kind") != rec.get("kind"):
            out.append(f"{path}.kind: expected {rec.get('kind')!r}, got "
                       f"{act.get('kind') if isinstance(act, dict) else act!r}")
            return
        for key, name_of in (("resources", lambda x: x.get("name")),
                             ("groups", lambda x: x.get("name")),
                             ("items", lambda x: (x.get("metadata") or {}).get("name"))):
            if key in rec:
                idx = {name_of(x): x for x in act.get(key) or []}
                for x in rec[key]:
                    n = name_of(x)
                    if n not in idx:
                        out.append(f"{path}.{key}: {n!r} missing")
                    else:
                        self.deep(x, idx[n], f"{path}.{key}[{n}]", out)
        for k in ("versions", "groupVersion", "name", "preferredVersion"):
            if k in rec:
                self.deep(rec[k], act.get(k), f"{path}.{k}", out)

    def compare_table(self, rec, act, path, out):
        if not isinstance(act, dict) or act.get("kind") != "Table":
            out.append(f"{path}: expected a Table, got {str(act)[:200]}")
            return
        rcols = [(c["name"], c["type"], c.get("priority", 0)) for c in rec["columnDefinitions"]]
        acols = [(c.get("name"), c.get("type"), c.get("priority", 0))
                 for c in act.get("columnDefinitions") or []]
        if rcols != acols:
            out.append(f"{path}.columnDefinitions: expected {rcols}, got {acols}")
        rrows, arows = rec.get("rows") or [], act.get("rows") or []
        if len(rrows) != len(arows):
            out.append(f"{path}.rows: expected {len(rrows)}, got {len(arows)}")
        for i, (rr, ar) in enumerate(zip(rrows, arows)):
            for j, (rc, ac) in enumerate(zip(rr.get("cells", []), ar.get("cells", []))):
                if rc == "<age>":
                    continue
                self.deep(rc, ac, f"{path}.rows[{i}].cells[{j}]", out)
            if "object" in rr:
                ro, ao = rr["object"], ar.get("object") or {}
                if ro.get("kind") != ao.get("kind"):
                    out.append(f"{path}.rows[{i}].object.kind: expected {ro.get('kind')!r}, "
                               f"got {ao.get('kind')!r}")
                self.deep((ro.get("metadata") or {}).get("name"),
                          (ao.get("metadata") or {}).get("name"),
                          f"{path}.rows[{i}].object.metadata.name", out)
                self.bind_only(ro, ao)

    # ---------------------------------------------------------------- running
    def run(self, steps) -> Result:
        res = Result()
        pending: dict[int, threading.Thread] = {}
        results: dict[int, tuple] = {}
        bg_by_start: dict[int, list] = {}
        for st in steps:
            c = st.get("concurrent")
            if c:
                bg_by_start.setdefault(c["started_before_step"], []).append(st)

        def do(st, index=None):
            r = st["request"]
            q = {k: self.subst(v) for k, v in (r.get("query") or {}).items()}
            watch = q.get("watch") in ("true", "1")
            return self.send(r["method"], self.subst(r["path"]), q, r.get("headers") or {},
                             self.subst(r.get("body"), index), watch)

        for st in steps:
            n = st["step"]
            for bg in bg_by_start.get(n, []):
                def run_bg(bg=bg):
                    try:
                        results[bg["step"]] = do(bg)
                    except Exception as e:  # reported at join time
                        results[bg["step"]] = e
                t = threading.Thread(target=run_bg, daemon=True)
                t.start()
                pending[bg["step"]] = t
                import time as _t
                _t.sleep(0.5)
            if st.get("fixture") and not self.with_fixtures:
                res.skipped.append(n)
                continue
            try:
                if st.get("concurrent"):
                    pending[n].join()
                    got = results[n]
                    if isinstance(got, Exception):
                        raise got
                elif st.get("repeat"):
                    for i in range(st["repeat"]["count"]):
                        got = do(st, i)
                else:
                    got = do(st)
            except KeyError as e:
                res.failures.append(f"step {n}: cannot build the request: {e}")
                continue
            status, headers, body = got
            wu = st.get("wait_until")
            if wu:
                import time as _t
                end = _t.time() + wu.get("timeout_seconds", 60)
                while True:
                    s2, _, _ = self.send(wu.get("method", "GET"), self.subst(wu["path"]), {},
                                         {"Accept": "application/json"}, None, False)
                    if s2 == wu["status"] or _t.time() > end:
                        break
                    _t.sleep(0.25)
                if s2 != wu["status"]:
                    res.failures.append(f"step {n}: wait_until {wu['path']} never returned "
                                        f"{wu['status']} (last {s2})")
            out: list[str] = []
            want = st["response"]
            if status != want["status"]:
                out.append(f"status: expected {want['status']}, got {status}")
            rb = want.get("body")
            if want.get("truncated") and isinstance(rb, list) and isinstance(body, list):
                keep = len(rb) // 2
                body = body[:keep] + body[-keep:] if len(body) > len(rb) else body
            if want.get("filtered") is None or isinstance(rb, dict):
                self.compare_body(rb, body, "body", out)
            if isinstance(rb, dict) and isinstance(body, dict):
                self.bind_only(rb, body)
            if "Warning" in (want.get("headers") or {}) and not headers.get("warning"):
                out.append("headers: expected Warning header(s)")
            where = res.informative if st.get("informative") or st.get("fixture") else res.failures
            where.extend(f"step {n} {st['request']['method']} {st['request']['path']}: {m}"
                         for m in out)
        return res


def replay_case(steps, send, with_fixtures=False, strict_messages=False) -> Result:
    return Replayer(send, with_fixtures, strict_messages).run(steps)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Replay recorded cases against a server.")
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--server", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--with-fixtures", action="store_true",
                    help="also run fixture steps (needed against a real kube-apiserver without "
                         "kube-controller-manager)")
    ap.add_argument("--strict-messages", action="store_true",
                    help="also compare Status messages verbatim")
    a = ap.parse_args(argv)
    send = HttpSender(a.server, a.ca, a.cert, a.key)
    bad = 0
    for path in a.cases:
        r = replay_case(load_case(path), send, a.with_fixtures, a.strict_messages)
        print(f"{path}: {len(r.failures)} failures, {len(r.informative)} informative differences"
              + (f", skipped fixture steps {r.skipped}" if r.skipped else ""))
        for m in r.failures:
            print("  FAIL", m)
        for m in r.informative:
            print("  info", m)
        bad += bool(r.failures)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
