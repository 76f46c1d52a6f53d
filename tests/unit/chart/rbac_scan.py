"""Find the Kubernetes API calls in lockstep's code and the RBAC permission each one needs.

The scan reads ``operator/lockstep/kube/`` and ``operator/lockstep/controller/``, the only code that
talks to the API server, and recognises these call sites (the convention the code follows):

1. ``KubeClient`` calls: ``<...>client.get|list|create|patch|replace|delete|watch_stream(KIND, ...)``,
   where the receiver's name ends in ``client`` (``client``, ``self.client``, ``self._client``) and
   ``KIND`` (first argument or ``kind=``) is a ``ResourceKind`` constant (``PODS``, ``POD_GROUPS`` ...
   anything with ``group`` and ``plural``) named directly. The subresource is the
   ``subresource="..."`` keyword. ``watch_stream`` needs ``watch``, ``replace`` needs ``update``.
2. Kind-forwarding helpers: a function that passes its own parameter (or a method that passes
   ``self.<attribute>``) as the ``KIND`` of form 1 is a helper with those verbs (``strict_merge_patch``,
   ``RawWatch``). A call of the helper by name with a ``ResourceKind`` constant is a call site; a
   ``subresource`` the helper forwards is read from that call.
3. kubernetes_asyncio API methods, in modules that import kubernetes_asyncio, by name, called or
   handed to ``Watch().stream(...)`` (which adds ``watch``): ``create_namespaced_pod_binding``,
   ``patch_namespaced_pod_status`` ... parsed as
   ``<verb>_[namespaced_]<kind>[_<subresource>][_for_all_namespaces]`` against ``KINDS``.
   ``*_custom_object*`` methods address podgroups, the only custom resource lockstep uses;
   ``create_namespaced_event`` exists in CoreV1Api and EventsV1Api, so it counts as both.
4. Kopf: ``@kopf.on.event(...)``, ``@kopf.index(...)`` and the other resource handlers need list
   and watch on their resource (``"pods"``, ``"v1", "pods"``, ``"resource.k8s.io", "v1",
   "resourceclaims"``, ``"podgroups.scheduling.lockstep.dev"``, or ``group=``/``plural=``/``kind=``);
   the change-tracking handlers (``on.create/update/delete/resume/field``, daemons, timers) also patch
   the object. ``kopf.operator(...)``/``kopf.run(...)`` adds Kopf's namespace observer: namespaces
   list and watch.
5. Raw HTTP: a string or f-string holding an API path (``/api/v1/...``, ``/apis/<group>/<version>/...``)
   passed straight to ``.get/.post/.put/.patch/.delete(path, ...)``, ``.request("METHOD", path, ...)``
   or ``.call_api(path, "METHOD", ...)``. POST is create, PUT update, PATCH patch, DELETE delete; GET
   is get on a named object, list on a collection, watch when ``watch`` is in the path or a
   ``params=`` dict literal.
6. Anything else is declared by a comment on the call's line or the line above:
   ``# rbac: <verb> <plural>[.<group>][/<subresource>]``, e.g. ``# rbac: create pods/binding``.

The transport itself (``TRANSPORT_CLASSES``: the classes every call goes through) is not scanned.
A client call whose kind is not a constant, an API path, kubernetes_asyncio method or Kopf handler
that no rule maps is reported as unmappable, so the test fails until the code follows the convention
or this module learns the new form.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[3]
SOURCE_ROOT = REPO_ROOT / "operator"
SCANNED_DIRS = (SOURCE_ROOT / "lockstep" / "kube", SOURCE_ROOT / "lockstep" / "controller")
TRANSPORT_CLASSES = {"KubeClient", "ResourceKind"}
PODGROUP_GROUP = "scheduling.lockstep.dev"


class Permission(NamedTuple):
    """One RBAC grant: API group, resource (``plural`` or ``plural/subresource``) and verb."""

    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource} ({self.group or 'core'})"


class CallSite(NamedTuple):
    file: str
    line: int
    call: str
    permissions: frozenset[Permission]


class Unmapped(NamedTuple):
    file: str
    line: int
    call: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.call}: {self.why}"


# kubernetes_asyncio kind (snake case, as in its method names) -> (API group, plural) alternatives.
# ``binding`` is the legacy bindings collection: mapped, so that using it shows up as a permission
# the role does not grant (lockstep binds through pods/binding).
KINDS: dict[str, tuple[tuple[str, str], ...]] = {
    "pod": (("", "pods"),),
    "binding": (("", "bindings"),),
    "node": (("", "nodes"),),
    "namespace": (("", "namespaces"),),
    "event": (("", "events"), ("events.k8s.io", "events")),
    "lease": (("coordination.k8s.io", "leases"),),
    "resource_claim": (("resource.k8s.io", "resourceclaims"),),
    "resource_claim_template": (("resource.k8s.io", "resourceclaimtemplates"),),
    "resource_slice": (("resource.k8s.io", "resourceslices"),),
    "device_class": (("resource.k8s.io", "deviceclasses"),),
    "custom_object": ((PODGROUP_GROUP, "podgroups"),),
    "custom_resource_definition": (("apiextensions.k8s.io", "customresourcedefinitions"),),
    "secret": (("", "secrets"),),
    "config_map": (("", "configmaps"),),
}
PLURAL_GROUPS: dict[str, str] = {plural: group for alts in KINDS.values() for group, plural in reversed(alts)}
NAME_TO_PLURAL: dict[str, str] = {
    **{plural: plural for plural in PLURAL_GROUPS},
    **{plural.removesuffix("s"): plural for plural in PLURAL_GROUPS},
    **{"".join(w.title() for w in kind.split("_")): alts[0][1] for kind, alts in KINDS.items()},
    "podgroup": "podgroups",
    "PodGroup": "podgroups",
    "deviceclass": "deviceclasses",
}

CLIENT_VERBS = {
    "get": "get",
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
    "watch_stream": "watch",
}
SUBRESOURCES = ("status", "binding", "scale", "eviction", "log", "ephemeralcontainers", "resize")
METHOD_VERBS = {
    "create": "create",
    "read": "get",
    "get": "get",
    "list": "list",
    "patch": "patch",
    "replace": "update",
    "delete_collection": "deletecollection",
    "delete": "delete",
}
_METHOD_RE = re.compile(
    r"^(?P<verb>create|read|get|list|patch|replace|delete_collection|delete)_"
    r"(?:namespaced_|cluster_)?(?P<rest>[a-z_]+?)(?:_for_all_namespaces)?(?:_with_http_info)?$"
)
HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
KOPF_CHANGE_HANDLERS = {"create", "update", "delete", "resume", "field", "daemon", "timer"}
KOPF_NO_RESOURCE_HANDLERS = {"startup", "cleanup", "login", "probe", "activity"}
KOPF_OPERATOR_PERMISSIONS = frozenset(Permission("", "namespaces", verb) for verb in ("list", "watch"))
_RBAC_COMMENT_RE = re.compile(r"#\s*rbac:\s*(?P<verb>[a-z]+)\s+(?P<resource>[A-Za-z0-9./-]+)")
_API_PATH_RE = re.compile(r"/(?:api/v1|apis/[^/]+/[^/]+)(?:/[^?\s\"']*)?")


class Helper(NamedTuple):
    """A function or class that forwards a ResourceKind it was given to KubeClient calls."""

    verbs: frozenset[str]
    subresource: str | None  # a literal the helper always uses
    forwards_subresource: bool  # takes ``subresource=`` from its caller


def _kubernetes_asyncio_methods() -> frozenset[str]:
    import kubernetes_asyncio.client as client

    names: set[str] = set()
    for class_name in dir(client):
        cls = getattr(client, class_name)
        if class_name.endswith("Api") and inspect.isclass(cls):
            names.update(m for m in dir(cls) if not m.startswith("_") and callable(getattr(cls, m)))
    return frozenset(names)


def _resource(plural: str, subresource: str | None) -> str:
    return f"{plural}/{subresource}" if subresource else plural


def permissions_of_method(name: str) -> frozenset[Permission] | None:
    """Permissions a kubernetes_asyncio API method needs; None if its kind is not in KINDS."""
    match = _METHOD_RE.match(name)
    if match is None:
        return None
    verb = METHOD_VERBS[match["verb"]]
    rest = match["rest"]
    subresource = None
    for candidate in SUBRESOURCES:
        if rest.endswith("_" + candidate) and rest.removesuffix("_" + candidate) in KINDS:
            rest, subresource = rest.removesuffix("_" + candidate), candidate
            break
    if rest not in KINDS:
        return None
    return frozenset(Permission(group, _resource(plural, subresource), verb) for group, plural in KINDS[rest])


def permission_of_comment(verb: str, resource: str) -> Permission | None:
    """Parse the ``<verb> <plural>[.<group>][/<subresource>]`` of an ``# rbac:`` comment."""
    resource_part, _, subresource = resource.partition("/")
    plural, dot, group = resource_part.partition(".")
    if not dot:
        if plural not in PLURAL_GROUPS:
            return None
        group = PLURAL_GROUPS[plural]
    return Permission(group, _resource(plural, subresource), verb)


def permissions_of_path(path: str, http_method: str, watch: bool) -> frozenset[Permission] | None:
    """Permissions of one raw request; None if the path does not name a resource."""
    segments = [s for s in path.split("?", 1)[0].split("/") if s]
    if segments[:2] == ["api", "v1"]:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, rest = segments[1], segments[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest or "{}" in rest[0] or "{}" in group:
        return None
    named = len(rest) >= 2
    if http_method == "GET":
        verb = "watch" if watch else ("get" if named else "list")
    elif http_method == "DELETE" and not named:
        verb = "deletecollection"
    elif http_method in HTTP_VERBS:
        verb = HTTP_VERBS[http_method]
    else:
        return None
    return frozenset({Permission(group, _resource(rest[0], rest[2] if len(rest) >= 3 else None), verb)})


def _is_kind(value: Any) -> bool:
    return isinstance(getattr(value, "group", None), str) and isinstance(getattr(value, "plural", None), str)


def _names_a_kind(node: ast.AST) -> bool:
    """A variable (``kind``, ``self.kind``, ``watched_kind``) that holds a ResourceKind by convention."""
    if isinstance(node, ast.Name):
        return node.id.endswith("kind")
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.endswith("kind")


def _literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def _called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _receiver(call: ast.Call) -> str:
    func = call.func
    return ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""


class _ModuleScan:
    def __init__(self, file: Path, methods: frozenset[str], helpers: dict[str, Helper]) -> None:
        self.relative = str(file.relative_to(REPO_ROOT)) if file.is_relative_to(REPO_ROOT) else str(file)
        self.lines = file.read_text().splitlines()
        self.tree = ast.parse("\n".join(self.lines), filename=str(file))
        self.methods = methods
        self.helpers = helpers
        self.globals = self._module_globals(file)
        self.sites: list[CallSite] = []
        self.unmapped: list[Unmapped] = []
        self.table_kinds: set[Any] = set()
        self.uses_kubernetes_asyncio = any(
            (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kubernetes_asyncio"))
            or (
                isinstance(node, ast.Import)
                and any(a.name.startswith("kubernetes_asyncio") for a in node.names)
            )
            for node in ast.walk(self.tree)
        )
        self._parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self._parents[child] = parent

    def _module_globals(self, file: Path) -> dict[str, Any]:
        """The module's names: imported from the module itself when it is lockstep's, else its imports."""
        if file.is_relative_to(SOURCE_ROOT):
            dotted = ".".join(file.relative_to(SOURCE_ROOT).with_suffix("").parts)
            try:
                return dict(vars(importlib.import_module(dotted.removesuffix(".__init__"))))
            except Exception:  # a module that does not import yet: fall back to what the AST shows
                pass
        names: dict[str, Any] = {}
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lockstep"):
                try:
                    module = importlib.import_module(node.module)
                except ImportError:
                    continue
                for alias in node.names:
                    if hasattr(module, alias.name):
                        names[alias.asname or alias.name] = getattr(module, alias.name)
            elif isinstance(node, ast.Assign) and (text := _literal(node.value)) is not None:
                names.update({t.id: text for t in node.targets if isinstance(t, ast.Name)})
        return names

    def _value(self, node: ast.AST | None) -> Any:
        """The constant a Name or ``module.NAME`` refers to, or None."""
        if isinstance(node, ast.Name):
            return self.globals.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = self.globals.get(node.value.id)
            if isinstance(module, ModuleType):
                return getattr(module, node.attr, None)
        return None

    def _template(self, node: ast.AST) -> str | None:
        """The text of a string, string constant or f-string; unresolved placeholders become ``{}``."""
        if (text := _literal(node)) is not None:
            return text
        if isinstance(node, ast.Name | ast.Attribute):
            value = self._value(node)
            return value if isinstance(value, str) else None
        if isinstance(node, ast.JoinedStr):
            parts: list[str] = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                else:
                    resolved = self._template(value.value) if isinstance(value, ast.FormattedValue) else None
                    parts.append(resolved if resolved is not None else "{}")
            return "".join(parts)
        return None

    def _enclosing(self, node: ast.AST) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, str | None]:
        """The function and the class a node sits in."""
        function = None
        parent = self._parents.get(node)
        while parent is not None:
            if function is None and isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
                function = parent
            if isinstance(parent, ast.ClassDef):
                return function, parent.name
            parent = self._parents.get(parent)
        return function, None

    def _in_transport(self, node: ast.AST) -> bool:
        parent = self._parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.ClassDef) and parent.name in TRANSPORT_CLASSES:
                return True
            parent = self._parents.get(parent)
        return False

    def _forwarder(self, call: ast.Call, kind_node: ast.AST) -> str | None:
        """The helper a kind-forwarding call makes its enclosing function (or class) into."""
        function, class_name = self._enclosing(call)
        if function is None:
            return None
        arguments = function.args
        parameters = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
        if isinstance(kind_node, ast.Name) and kind_node.id in parameters:
            return class_name if function.name == "__init__" and class_name else function.name
        if (
            isinstance(kind_node, ast.Attribute)
            and isinstance(kind_node.value, ast.Name)
            and kind_node.value.id == "self"
            and class_name is not None
        ):
            return class_name
        return None

    def _kind_argument(self, call: ast.Call) -> ast.expr | None:
        """The argument of a helper call that carries the ResourceKind: a constant or a ``*kind`` name."""
        arguments = [*call.args, *(kw.value for kw in call.keywords)]
        constant = next((a for a in arguments if _is_kind(self._value(a))), None)
        return constant or next((a for a in arguments if _names_a_kind(a)), None)

    def _kind_calls(self) -> Iterator[tuple[ast.Call, frozenset[str], ast.expr | None, Helper | None]]:
        """KubeClient calls and helper calls: (call, verbs, kind argument, helper or None)."""
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Call) or self._in_transport(node):
                continue
            name = _called_name(node)
            if name in CLIENT_VERBS and _receiver(node).lower().endswith("client"):
                kind_node = node.args[0] if node.args else _keyword(node, "kind")
                yield node, frozenset({CLIENT_VERBS[name]}), kind_node, None
            elif name in self.helpers and (kind_node := self._kind_argument(node)) is not None:
                yield node, self.helpers[name].verbs, kind_node, self.helpers[name]

    def kind_tables(self) -> set[Any]:
        """ResourceKind constants listed together in a dict, list, set or tuple literal."""
        found: set[Any] = set()
        for node in ast.walk(self.tree):
            elements: list[ast.expr | None] = []
            if isinstance(node, ast.Dict):
                elements = list(node.keys)
            elif isinstance(node, ast.List | ast.Set | ast.Tuple):
                elements = list(node.elts)
            kinds = [self._value(e) for e in elements if e is not None]
            if len(kinds) >= 2 and all(_is_kind(kind) for kind in kinds):
                found.update(kinds)
        return found

    def learn_helpers(self) -> bool:
        """Record kind-forwarding functions and classes; True if a new one was found."""
        learned = False
        for call, verbs, kind_node, helper in self._kind_calls():
            if kind_node is None or _is_kind(self._value(kind_node)):
                continue
            name = self._forwarder(call, kind_node)
            if name is None:
                continue
            sub_node = _keyword(call, "subresource")
            literal = _literal(sub_node) if helper is None else helper.subresource
            forwards = (sub_node is not None and literal is None) or bool(
                helper and helper.forwards_subresource
            )
            known = self.helpers.get(name)
            merged = Helper(
                verbs | (known.verbs if known else frozenset()),
                literal or (known.subresource if known else None),
                forwards or bool(known and known.forwards_subresource),
            )
            if merged != known:
                self.helpers[name] = merged
                learned = True
        return learned

    def scan(self, table_kinds: set[Any]) -> None:
        declared = self._declarations()
        for call, verbs, kind_node, helper in self._kind_calls():
            kind = self._value(kind_node)
            if _is_kind(kind):
                kinds = [kind]
            elif kind_node is not None and self._forwarder(call, kind_node) is not None:
                continue  # inside a helper: its callers are the call sites
            elif kind_node is not None and _names_a_kind(kind_node) and table_kinds:
                kinds = sorted(table_kinds, key=lambda k: (k.group, k.plural))
            else:
                self._add(call, ast.unparse(call.func), None, "KubeClient call whose kind is not a constant")
                continue
            sub_node = _keyword(call, "subresource")
            if helper is not None and not helper.forwards_subresource:
                subresource = helper.subresource
            else:
                subresource = _literal(sub_node)
                if sub_node is not None and subresource is None:
                    self._add(call, ast.unparse(call.func), None, "subresource= is not a string literal")
                    continue
            permissions = frozenset(
                Permission(k.group, _resource(k.plural, subresource), verb) for k in kinds for verb in verbs
            )
            self._add(call, ast.unparse(call.func), permissions, "")
        self.table_kinds = table_kinds
        for node in ast.walk(self.tree):
            if self._in_transport(node):
                continue
            if isinstance(node, ast.Attribute) and node.attr in self.methods and self.uses_kubernetes_asyncio:
                self._scan_method(node)
            elif isinstance(node, ast.Call):
                self._scan_kopf(node)
            elif isinstance(node, ast.Constant | ast.JoinedStr):
                self._scan_string(node)
        self._apply(declared)

    def _declarations(self) -> dict[int, frozenset[Permission]]:
        declared: dict[int, frozenset[Permission]] = {}
        for number, text in enumerate(self.lines, 1):
            found = set()
            for match in _RBAC_COMMENT_RE.finditer(text):
                permission = permission_of_comment(match["verb"], match["resource"])
                if permission is None:
                    self.unmapped.append(
                        Unmapped(self.relative, number, text.strip(), "unknown resource in # rbac:")
                    )
                else:
                    found.add(permission)
            if found:
                declared[number] = frozenset(found)
        return declared

    def _apply(self, declared: dict[int, frozenset[Permission]]) -> None:
        """A ``# rbac:`` comment replaces what was found on its line and the next one."""
        covered = {line for number in declared for line in (number, number + 1)}
        self.sites = [s for s in self.sites if s.line not in covered]
        self.unmapped = [u for u in self.unmapped if u.line not in covered or "# rbac:" in u.why]
        self.sites += [CallSite(self.relative, n, "# rbac:", perms) for n, perms in declared.items()]

    def _add(self, node: ast.AST, call: str, permissions: frozenset[Permission] | None, why: str) -> None:
        line = getattr(node, "lineno", 0)
        if permissions is None:
            self.unmapped.append(Unmapped(self.relative, line, call, why))
        else:
            self.sites.append(CallSite(self.relative, line, call, permissions))

    def _scan_method(self, node: ast.Attribute) -> None:
        permissions = permissions_of_method(node.attr)
        parent = self._parents.get(node)
        if (
            permissions is not None
            and isinstance(parent, ast.Call)
            and node in parent.args
            and _called_name(parent) == "stream"
        ):
            permissions = permissions | {Permission(p.group, p.resource, "watch") for p in permissions}
        self._add(node, node.attr, permissions, "kubernetes_asyncio method of a kind not in KINDS")

    def _scan_kopf(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Attribute):
            return  # e.g. kopf.on.event(...)(handler): the inner call is the decorator
        dotted = ast.unparse(node.func)
        if dotted in ("kopf.operator", "kopf.run"):
            self._add(node, dotted, KOPF_OPERATOR_PERMISSIONS, "")
        elif dotted.startswith(("kopf.on.", "kopf.index", "kopf.daemon", "kopf.timer")):
            handler = dotted.rsplit(".", 1)[-1]
            if handler in KOPF_NO_RESOURCE_HANDLERS:
                return
            verbs = ["list", "watch", *(["patch"] if handler in KOPF_CHANGE_HANDLERS else [])]
            if node.args and all(isinstance(a, ast.Attribute) and _names_a_kind(a.value) for a in node.args):
                resources = {(kind.group, kind.plural) for kind in self.table_kinds} or None
            else:
                resource = self._kopf_resource(node)
                resources = None if resource is None else {resource}
            permissions = (
                None
                if resources is None
                else frozenset(Permission(group, plural, v) for group, plural in resources for v in verbs)
            )
            self._add(node, dotted, permissions, "Kopf handler whose resource is not a literal in the table")

    def _kopf_resource(self, node: ast.Call) -> tuple[str, str] | None:
        args = [self._template(arg) for arg in node.args]
        if any(value is None or "{}" in value for value in args):
            return None
        positional = [value for value in args if value is not None]
        keywords = {kw.arg: self._template(kw.value) for kw in node.keywords if kw.arg}
        group = keywords.get("group")
        name = keywords.get("plural") or keywords.get("kind")
        if name is None and positional:
            name = positional[-1]
            if len(positional) == 1 and "." in name:
                name, _, group = name.partition(".")
            elif len(positional) == 3:
                group = positional[0]
            elif len(positional) == 2:
                group = "" if positional[0] == "v1" else positional[0].split("/", 1)[0]
        plural = NAME_TO_PLURAL.get(name or "")
        if plural is None:
            return None
        return (group if group is not None else PLURAL_GROUPS[plural]), plural

    def _scan_string(self, node: ast.Constant | ast.JoinedStr) -> None:
        parent = self._parents.get(node)
        if isinstance(parent, ast.JoinedStr | ast.FormattedValue | ast.Expr):
            return  # part of an f-string scanned as a whole, or a docstring
        text = self._template(node)
        match = _API_PATH_RE.search(text or "")
        if text is None or match is None:
            return
        http_method, watch = self._http_method(node, parent, text)
        permissions = None if http_method is None else permissions_of_path(match.group(0), http_method, watch)
        why = (
            "API path not passed straight to an HTTP method call"
            if http_method is None
            else "API path whose resource is not a literal"
        )
        self._add(node, match.group(0), permissions, why)

    def _http_method(self, node: ast.AST, parent: ast.AST | None, text: str) -> tuple[str | None, bool]:
        if not isinstance(parent, ast.Call):
            return None, False
        name = _called_name(parent)
        params = _keyword(parent, "params")
        watch = "watch" in text or (
            isinstance(params, ast.Dict) and any(_literal(k) == "watch" for k in params.keys if k is not None)
        )
        args = parent.args
        if name in ("get", "post", "put", "patch", "delete") and args and args[0] is node:
            return name.upper(), watch
        if name == "request" and len(args) >= 2 and args[1] is node and (method := _literal(args[0])):
            return method.upper(), watch
        if name == "call_api" and len(args) >= 2 and args[0] is node and (method := _literal(args[1])):
            return method.upper(), watch
        return None, False


def python_files(directories: Iterable[Path] = SCANNED_DIRS) -> Iterator[Path]:
    for directory in directories:
        if directory.is_dir():
            yield from sorted(directory.rglob("*.py"))


def scan(files: Iterable[Path]) -> tuple[list[CallSite], list[Unmapped]]:
    """Every API call site in ``files``, and every one the convention cannot map."""
    methods = _kubernetes_asyncio_methods()
    helpers: dict[str, Helper] = {}
    modules = [_ModuleScan(file, methods, helpers) for file in files]
    while any([module.learn_helpers() for module in modules]):
        pass
    table_kinds: set[Any] = set().union(*(module.kind_tables() for module in modules))
    sites: list[CallSite] = []
    unmapped: list[Unmapped] = []
    for module in modules:
        module.scan(table_kinds)
        sites.extend(module.sites)
        unmapped.extend(module.unmapped)
    return sites, unmapped


def granted_permissions(role: dict[str, Any]) -> set[Permission]:
    """Expand a Role's or ClusterRole's rules into single permissions (resourceNames are ignored)."""
    return {
        Permission(group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }
