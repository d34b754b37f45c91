"""CPU check of train_mtp.py's export against Strata (no GPU, no transformers, no safetensors package needed).

    STRATA_BIN=build/strata /usr/bin/python3 tools/demo_model/check_mtp_export_cpu.py

Needs torch (Debian's python3-torch 1.13 will do: FP8 is decoded by a table here, safetensors read and written by
the small functions below) and a strata binary with `model mtp-logits`. What it does, end to end on the CPU: MtpLayer initialised from the real models/demo tensors (as train_mtp.py does), exported by
export_update with a real safetensors writer, loaded by Strata (`strata model mtp-logits`) through the index; Strata's
draft logits vs MtpLayer's on Strata's own hidden streams (a 141-token sequence, past the 128-token window). Then
check_strata.py mtp on strata_check's file. Run before the first device run: Strata's logits equalled MtpLayer's
within 1.3e-6 of each row's scale, argmax on 140 / 140 rows (takes ~3 minutes on the 2-core machine, mostly JSON).
The layer is the initialisation train_mtp.py starts from, with e_proj / h_proj / enorm / gate bias perturbed."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import torch

torch.cuda.is_bf16_supported = lambda: True
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STRATA = os.environ.get("STRATA_BIN", os.path.join(REPO, "build", "strata"))
if not hasattr(torch, "float8_e4m3fn"):
    torch.float8_e4m3fn = "float8-shim"

# e4m3fn decode table
def e4m3(b):
    s = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 0xF, b & 7
    if e == 0:
        return s * (m / 8) * 2 ** -6
    if e == 15 and m == 7:
        return float("nan")
    return s * (1 + m / 8) * 2 ** (e - 7)
LUT = torch.tensor([e4m3(b) for b in range(256)], dtype=torch.float32)


def st_load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        raw = bytearray(data[a:b])
        dt = h["dtype"]
        if dt == "BF16":
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16)
        elif dt == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        elif dt == "I32":
            t = torch.frombuffer(raw, dtype=torch.int32)
        elif dt == "I64":
            t = torch.frombuffer(raw, dtype=torch.int64)
        elif dt == "F8_E4M3":
            t = LUT[torch.frombuffer(raw, dtype=torch.uint8).long()]  # decoded values
        else:
            raise ValueError(dt)
        out[name] = t.reshape(h["shape"]).clone()
    return out


def st_save(tensors, path, metadata=None):
    header, blobs, off = {"__metadata__": metadata or {}}, [], 0
    names = {torch.bfloat16: "BF16", torch.float32: "F32"}
    for k, t in tensors.items():
        t = t.contiguous()
        b = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


st = types.ModuleType("safetensors")
stt = types.ModuleType("safetensors.torch")
stt.save_file, stt.load_file = st_save, st_load
st.torch = stt
sys.modules["safetensors"] = st
sys.modules["safetensors.torch"] = stt
sys.path.insert(0, os.path.join(REPO, "tools", "demo_model"))
os.environ.setdefault("DEMO_START", str(time.time()))
import train_mtp as M  # noqa: E402

demo = os.path.join(REPO, "models", "demo")
cfg = json.load(open(os.path.join(demo, "config.json")))
official = st_load(os.path.join(demo, "model.safetensors"))
scale = official["embed.scale"]
embed = official["embed.weight"] * scale.repeat_interleave(128, 0)[: 129280].repeat_interleave(128, 1)[:, :192]
init = M.initial_tensors(official, cfg, 0, 3)
torch.manual_seed(1)
# perturb e_proj/h_proj a little, so the test is not on identities only
init["e_proj.weight"] = init["e_proj.weight"] + 0.05 * torch.randn(192, 192)
init["h_proj.weight"] = init["h_proj.weight"] + 0.05 * torch.randn(192, 192)
init["enorm.weight"] = init["enorm.weight"] + 0.1 * torch.randn(192)
init["ffn.gate.bias"] = init["ffn.gate.bias"] + 0.01 * torch.randn(8)
mtp = M.MtpLayer(cfg, init, embed)
mtp.round_to_export()
mtp.eval()

work = tempfile.mkdtemp(prefix="mtp_e2e_")
update = os.path.join(work, "update")
exported, files = M.export_update(mtp, demo, update)
print("export", files)
model = os.path.join(work, "model")
os.makedirs(model)
for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
    shutil.copyfile(os.path.join(demo, f), os.path.join(model, f))
for f in os.listdir(update):
    shutil.copyfile(os.path.join(update, f), os.path.join(model, f))
# sanity: read back
back = st_load(os.path.join(model, "mtp.safetensors"))
assert all(torch.equal(back[k].float(), v.float()) and back[k].dtype == v.dtype for k, v in exported.items())

info = subprocess.run([STRATA, "model", "info", "--model", model], capture_output=True, text=True)
print(info.returncode, info.stdout[-600:], info.stderr[-600:])

tokens = [0] + list(range(100, 160)) + [5, 17, 300, 2, 9, 41, 77, 128, 3, 260] * 8
dump_path = os.path.join(work, "strata.json")
r = subprocess.run([STRATA, "model", "mtp-logits", "--model", model, "--tokens", ",".join(map(str, tokens)),
                    "--out", dump_path], capture_output=True, text=True)
print("mtp-logits", r.returncode, r.stderr[-400:])
dump = json.load(open(dump_path))
n = len(tokens) - 1
hidden = torch.tensor(dump["hidden"]).view(len(tokens), 4, 192)
strata_logits = torch.tensor(dump["mtp_logits"])
with torch.no_grad():
    ids = torch.tensor([tokens])
    out = mtp(hidden[None, :n], ids[:, 1:])
    mine = mtp.logits(out[0])
print("rows", n, "strata vs MtpLayer rel", M.rel_diff(mine, strata_logits),
      "argmax agree", int((mine.argmax(-1) == strata_logits.argmax(-1)).sum()), "/", n)


# check_strata.py mtp with an expected file from strata_check on Strata's streams
class StrataMain:
    head = embed

    def __call__(self, ids):
        return hidden[None, : ids.shape[1]], None


chk = M.strata_check(StrataMain(), mtp, [tokens], torch.device("cpu"))
exp_path = os.path.join(work, "expected.json")
json.dump(chk, open(exp_path, "w"))
c = subprocess.run(["python3", os.path.join(REPO, "tools", "demo_model", "check_strata.py"),
                    "mtp", "--strata", STRATA, "--model", model, "--expected", exp_path], capture_output=True, text=True)
print("check_strata mtp:", c.returncode, c.stdout[-500:], c.stderr[-500:])
print("work dir", work)
