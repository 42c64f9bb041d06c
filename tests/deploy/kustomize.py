"""A small kustomize-equivalent renderer for the subset of kustomization features k8s/ uses.

Supported: ``resources`` (files and directories with a kustomization), ``namespace`` (which, as in
kustomize, also renames a Namespace resource), ``labels``
(pairs, metadata only), ``configMapGenerator`` (files and ``options.labels``, with
``generatorOptions.disableNameSuffixHash``),
``images`` (newName/newTag) and ``patches`` with inline RFC 6902 operations and a ``target`` by
kind and optionally name. Anything else in a kustomization.yaml is an error, so the manifests
cannot drift into features this renderer (and so the tests) would silently skip.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

SUPPORTED = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "labels",
    "configMapGenerator",
    "generatorOptions",
    "images",
    "patches",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def render(directory: str | Path) -> list[dict[str, Any]]:
    d = Path(directory)
    k = yaml.safe_load((d / "kustomization.yaml").read_text())
    unknown = set(k) - SUPPORTED
    if unknown:
        raise ValueError(f"{d}/kustomization.yaml uses {sorted(unknown)}, which the test renderer does not support")
    docs: list[dict[str, Any]] = []
    for res in k.get("resources", []):
        p = d / res
        if p.is_dir():
            docs += render(p)
        else:
            docs += [x for x in yaml.safe_load_all(p.read_text()) if x]
    for gen in k.get("configMapGenerator", []):
        if not k.get("generatorOptions", {}).get("disableNameSuffixHash"):
            raise ValueError("configMapGenerator needs generatorOptions.disableNameSuffixHash: true here")
        if set(gen) - {"name", "files", "options"} or set(gen.get("options", {})) - {"labels"}:
            raise ValueError(f"{d}: configMapGenerator {gen['name']} uses more than files and options.labels")
        data = {Path(f).name: (d / f).read_text() for f in gen.get("files", [])}
        meta: dict[str, Any] = {"name": gen["name"]}
        if labels := gen.get("options", {}).get("labels"):
            meta["labels"] = dict(labels)
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    for patch in k.get("patches", []):
        target = patch["target"]
        ops = yaml.safe_load(patch["patch"])
        hits = [
            i
            for i, x in enumerate(docs)
            if x["kind"] == target["kind"] and target.get("name", x["metadata"]["name"]) == x["metadata"]["name"]
        ]
        if not hits:
            raise ValueError(f"{d}: patch target {target} matches nothing")
        for i in hits:
            docs[i] = jsonpatch.apply_patch(docs[i], ops)
    for img in k.get("images", []):
        for x in docs:
            for c in _containers(x):
                name = c["image"].split(":")[0]
                if name in (img["name"], img.get("newName")):
                    c["image"] = f"{img.get('newName', img['name'])}:{img.get('newTag', 'latest')}"
    for x in docs:
        meta = x.setdefault("metadata", {})
        if "namespace" in k and x["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        elif "namespace" in k and x["kind"] == "Namespace":  # as kustomize does: it renames Namespaces
            meta["name"] = k["namespace"]
        for lab in k.get("labels", []):
            meta.setdefault("labels", {}).update(lab["pairs"])
    return copy.deepcopy(docs)


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) if "template" in spec else {}
    return list(pod.get("containers", [])) + list(pod.get("initContainers", []))
