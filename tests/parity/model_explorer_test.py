"""What ``verify(..., explorer_dir=)`` writes opens in the real Model Explorer.

The oracle is Model Explorer itself (ai-edge-model-explorer, pinned in
python/tool_requirements/model_explorer.txt, in a cached venv of its own): its server converts
our program.mlir with its built-in MLIR adapter through ``/apipost/v1/send_command``, and every
node-data key must be a node id of the graph it answers, naming the op we say it names (the
node's ``hlo.instruction`` attribute, which the adapter copies from the op). One case then
renders in headless Chromium with the node data loaded the way ``model-explorer MODEL
--node_data_paths=F`` loads it (the ``data`` URL parameter), and the overlay is checked in the
DOM (the node-data provider and its per-node values) and in the pixels (the worst ops' colour).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
import torch

from torch_xla_ext import parity
from torch_xla_ext.parity import explorer

import tool_venv  # python/ (//python:tool_venv; tests/conftest.py under plain pytest)

from tests import zoo
from tests.parity.browser import render


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    venv = tool_venv.ensure("model_explorer")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("me") / "server.log", "w+")
    proc = subprocess.Popen([str(venv / "bin" / "model-explorer"), "--no_open_in_browser", "--host", "127.0.0.1",
                             "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(url + "/check_health", timeout=5).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                log.seek(0)
                pytest.fail(f"Model Explorer's server did not start:\n{log.read()[-3000:]}")
            time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
    log.close()


def convert(server: str, path: str) -> dict:
    """Model Explorer's answer to converting ``path`` with its built-in MLIR adapter."""
    body = json.dumps({"extensionId": "builtin_mlir", "cmdId": "convert", "modelPath": os.path.abspath(path),
                       "settings": {}, "deleteAfterConversion": False}).encode()
    req = urllib.request.Request(server + "/apipost/v1/send_command", data=body,
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=300).read())


def check_opens(server: str, directory: str) -> tuple[dict, dict]:
    """Converts the program in Model Explorer and checks each node-data key against its graph;
    returns (node data of main, the adapter's nodes of main by id)."""
    answer = convert(server, os.path.join(directory, "program.mlir"))
    assert "error" not in answer, answer.get("error")
    graphs = {g["id"]: g for c in answer["graphCollections"] for g in c["graphs"]}
    nodes = {n["id"]: n for n in graphs["main"]["nodes"]}
    with open(os.path.join(directory, "node_data.json")) as f:
        data = json.load(f)
    with open(os.path.join(directory, "node_names.json")) as f:
        names = json.load(f)
    assert set(data) == {"main"}
    results = data["main"]["results"]
    assert results, "no node data"
    unmatched = sorted(set(results) - set(nodes), key=int)
    assert not unmatched, f"{len(unmatched)}/{len(results)} node-data keys name no node: {unmatched[:10]}"
    for key in results:
        attrs = {a["key"]: a["value"] for a in nodes[key]["attrs"]}
        assert attrs.get("hlo.instruction", "").strip('"') == names[key], (key, nodes[key]["label"], attrs)
    labels = {n["label"] for n in nodes.values()}
    assert not any(lbl.startswith("mhlo.") for lbl in labels)
    # Module paths: on each node that has one (module_path_test checks them with op metadata on),
    # or the reason there are none: torch_xla wrote no op metadata in this process.
    with open(os.path.join(directory, "module_paths.json")) as f:
        modules = json.load(f)
    if modules["available"]:
        for key, path in modules["paths"].items():
            attrs = {a["key"]: a["value"] for a in nodes[key]["attrs"]}
            assert attrs.get("module.path", "").strip('"') == path, (key, attrs)
    else:
        assert not modules["paths"] and "XLA_HLO_DEBUG=1" in modules["note"]
        assert not any(a["key"] == "module.path" for n in nodes.values() for a in n["attrs"])
    return data["main"], nodes


def _dialects(path: str) -> set[str]:
    """The dialects of every op in the module at ``path`` (parsed with JAX's MLIR)."""
    from jax._src.interpreters import mlir as jmlir
    from jax.extend.mlir import ir

    seen: set[str] = set()

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    seen.add(inner.operation.name.split(".")[0])
                    walk(inner.operation)

    with jmlir.make_ir_context():
        walk(ir.Module.parse(open(path).read()).operation)
    return seen


_MHLO = """func.func @main(%a: tensor<4xf32> loc("p0.1")) -> tensor<4xf32> {
  %0 = mhlo.erf %a : tensor<4xf32> loc("erf.2")
  %1 = mhlo.tan %0 : tensor<4xf32> loc("tan.3")
  %2 = mhlo.cosine %1 : tensor<4xf32> loc("cosine.4")
  return %2 : tensor<4xf32> loc("r")
}"""


def test_mhlo_ops_become_chlo_and_stablehlo_ops_model_explorer_reads(server, tmp_path):
    path = tmp_path / "program.mlir"
    path.write_text(explorer.explorer_module_text(_MHLO))
    assert _dialects(str(path)) == {"chlo", "stablehlo", "func"}
    answer = convert(server, str(path))
    assert "error" not in answer, answer.get("error")
    (main,) = [g for c in answer["graphCollections"] for g in c["graphs"] if g["id"] == "main"]
    labels = {n["id"]: n["label"] for n in main["nodes"]}
    ids = explorer.node_ids(path.read_text())["main"]
    assert [labels[i] for i in ids] == ["chlo.erf", "chlo.tan", "stablehlo.cosine", "Outputs"]
    # The untouched text is what Model Explorer cannot read.
    raw = tmp_path / "raw.mlir"
    raw.write_text(_MHLO)
    assert "mhlo" in convert(server, str(raw)).get("error", "")


def test_an_mhlo_op_without_counterpart_is_named():
    text = _MHLO.replace("%1 = mhlo.tan %0 : tensor<4xf32>", "%1 = mhlo.copy %0 : tensor<4xf32>")
    with pytest.raises(parity.ParityError, match="mhlo.copy"):
        explorer.explorer_module_text(text)


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_program_opens_in_model_explorer(name, server, tmp_path):
    """Every zoo model's program (bf16, as verify captures it) converts, and the node id we give
    each of main's top-level ops is the adapter's node for that op (the ops node data can cover)."""
    from torch_xla_ext.parity import runners
    from jax.extend.mlir import ir

    from torch_xla_ext.parity.stablehlo import Program, location_name, functions, parse

    model, args, kwargs = zoo.build(name)
    run = runners.run_xla(model, args, kwargs, runners.torch_dtype("bf16"), 0, True)
    program = Program.from_hlo_proto(run.proto)
    text = explorer.explorer_module_text(program.text)
    path = tmp_path / "program.mlir"
    path.write_text(text)
    assert _dialects(str(path)) <= {"stablehlo", "chlo", "func"}
    answer = convert(server, str(path))
    assert "error" not in answer, answer.get("error")
    nodes = {n["id"]: n for c in answer["graphCollections"] for g in c["graphs"] if g["id"] == "main"
             for n in g["nodes"]}
    # main's top-level ops as torch_xla's program has them (before our rewrite): (name, HLO name).
    ctx, module = parse(program.text, "the program")
    with ctx:
        (main,) = [f for f in functions(module) if ir.StringAttr(f.attributes["sym_name"]).value == "main"]
        ops = [(op.operation.name, location_name(op.operation.location))
               for op in main.regions[0].blocks[0].operations]
    ids = explorer.node_ids(text)["main"]
    assert len(ids) == len(ops)
    checked = 0
    for node_id, (op_name, hlo_name) in zip(ids, ops):
        assert node_id in nodes, f"{name}: op {op_name} has no node {node_id}"
        if op_name == "func.return":
            assert nodes[node_id]["label"] == "Outputs"
            continue
        attrs = {a["key"]: a["value"] for a in nodes[node_id]["attrs"]}
        assert nodes[node_id]["label"] == op_name.replace("mhlo.", "chlo."), (name, node_id)
        if hlo_name:
            assert attrs.get("hlo.instruction", "").strip('"') == hlo_name, (name, node_id, attrs)
            checked += 1
    assert checked > 0.9 * len(ops)


@pytest.mark.parametrize("name", ["resnet18"])
def test_verify_explorer_dir_opens_in_model_explorer(name, server, tmp_path):
    """verify(..., explorer_dir=) end to end on the conv net whose keys once missed (the GELU block
    below goes end to end too)."""
    model, args, kwargs = zoo.build(name)
    out = str(tmp_path / "explorer")
    parity.verify(model, args, kwargs, dtype="bf16", explorer_dir=out)
    graph, nodes = check_opens(server, out)
    values = [v["value"] for v in graph["results"].values()]
    assert all(np.isfinite(values)) and min(values) >= 0
    # Thresholds ascend and the last one covers every value: each node gets a colour.
    edges = [t["value"] for t in graph["thresholds"]]
    assert edges == sorted(edges) and edges[-1] >= max(values)


class Block(torch.nn.Module):
    """A transformer MLP block as the doctor's example has it: LayerNorm, Linear, exact GELU
    (mhlo.erf from hlo_to_stablehlo), Linear, residual."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(self.act(self.up(self.norm(x))))


def _outputs_dir(tmp_path) -> str:
    return os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", str(tmp_path))


def test_renders_with_node_data_in_chromium(server, tmp_path):
    torch.manual_seed(0)
    out = str(tmp_path / "explorer")
    parity.verify(Block(), (torch.randn(4, 8, 64),), dtype="bf16", explorer_dir=out)
    graph, nodes = check_opens(server, out)
    # The exact GELU's erf is a CHLO node now (it was an mhlo op Model Explorer cannot read).
    assert any(n["label"] == "chlo.erf" for n in nodes.values())

    config = {"models": [{"url": os.path.abspath(os.path.join(out, "program.mlir"))}],
              "nodeData": [os.path.abspath(os.path.join(out, "node_data.json"))], "nodeDataTargets": [""]}
    url = f"{server}/?data={urllib.parse.quote(json.dumps(config))}"
    shot = os.path.join(_outputs_dir(tmp_path), "model_explorer_block.png")
    name = graph["name"]
    page = render(url, until=f"document.querySelector('canvas') !== null && "
                             f"document.body.innerText.includes({json.dumps(name)})",
                  evaluate={"text": "document.body.innerText"}, screenshot=shot, settle_s=2, timeout=120)
    text, png = page["text"], page["screenshot"]  # (settle_s: the graph finishes drawing first)
    # DOM: the provider is loaded and its per-node table lists the worst op's value.
    worst_key = max(graph["results"], key=lambda k: graph["results"][k]["value"])
    worst = graph["results"][worst_key]["value"]
    assert "NODE DATA PROVIDERS" in text.upper() and name in text
    assert f"{worst}" in text or f"{worst:.6g}"[:6] in text, "the worst op's value is not in the node data table"
    # Pixels: nodes painted in the worst band's colour are on screen.
    from io import BytesIO

    from PIL import Image

    img = np.asarray(Image.open(BytesIO(png)).convert("RGB")).astype(int)
    colour = graph["thresholds"][-1]["bgColor"]
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    painted = int((np.abs(img - rgb).sum(axis=-1) <= 12).sum())
    assert painted > 50, f"no node is painted {colour} in {shot}"
    print(f"screenshot: {shot}; {painted} pixels in the worst band's colour")
