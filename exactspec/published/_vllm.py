"""vLLM's v1 rejection sampler from the published wheel, without the rest of vLLM: fetch, verify, unpack a subset.

The vllm 0.32.0 wheel is 327 MB (824 MB unpacked: 5,444 files, 2,879 of them Python) and declares torch 2.13
(CUDA), flashinfer and ~70 other dependencies. ``vllm/v1/sample/rejection_sampler.py`` runs on CPU under Triton's
interpreter with 46 of its Python files (1 MB) and nothing else from vLLM. :func:`fetch` downloads the wheel once
(``pip download --no-deps``), checks its sha256 against the one PyPI published (:data:`RELEASES`), unpacks those
files and the wheel's ``METADATA`` (vLLM reads its own version from it) into a cache directory, deletes the wheel,
and writes **stubs** for nine vLLM packages that those files import but that play no part in the sampling math
(each listed in :data:`STUBS` with what the audited code takes from it). A stub module answers any name with a
placeholder that raises if it is ever called, so a stub the audited path did use would fail loudly, never change a
result. Nothing of vLLM ships with exactspec: the files come from the wheel at run time.

``exactspec fetch-vllm [--release 0.33.0]`` fetches (if needed) and prints the directory to put on ``PYTHONPATH``;
:func:`load` fetches and imports ``vllm.v1.sample.rejection_sampler`` with ``TRITON_INTERPRET=1``. Two
environment settings are needed, both set by :func:`load` (and by hand for the command line): ``TRITON_INTERPRET=1``
before the module is imported (its ``@triton.jit`` kernels become interpreted), and ``CUDA_VISIBLE_DEVICES=`` while
``vllm.triton_utils`` is imported: vLLM disables Triton (``HAS_TRITON = False``, kernels replaced by placeholders)
when it finds no active GPU driver, except in this "distributed environment" case
(``vllm/triton_utils/importing.py``). A release whose audited module is not in its wheel (0.34.0) is refused with
:class:`ReleaseUnsupported`, saying why.
"""


from __future__ import annotations

import ast
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from ..errors import ExactSpecError, InvalidValue, ReleaseUnsupported

#: the release audited by default: the newest vLLM built for torch 2.13 (this project's torch); its Triton is 3.7.1
DEFAULT_VERSION = "0.32.0"

#: the releases this script knows: the sha256 of each x86_64 wheel as published on PyPI (checked after download),
#: the torch it declares (``Requires-Dist``, not installed: ``--no-deps``), the wheel files its audited module needs
#: beyond :data:`BASE_FILES`, and, where the audited module is not in the wheel, why (``fetch`` refuses it)
RELEASES: dict[str, dict] = {
    "0.32.0": {"sha256": "5e2ecdc5b0baf72921c288486417ca82778456a448e4fe60b62ee43c0dfc8611", "torch": "==2.13.0",
               "extra_files": ()},
    # rejection_sampler.py imports the FLy kernels (opt-in: rejection_sample_method == "fly") at module level;
    # vllm/env_override.py and vllm/utils/torch_utils.py import torch_version.py (its torch gates: <= 2.12, 2.16)
    "0.33.0": {"sha256": "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa", "torch": "==2.14.0",
               "extra_files": ("vllm/utils/torch_version.py", "vllm/v1/spec_decode/fly.py")},
    "0.34.0": {"sha256": "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2", "torch": "==2.14.0",
               "extra_files": (),
               "absent": "vllm 0.34.0 removed the v1 GPU model runner (vllm/v1/worker/gpu_model_runner.py) and with "
                         "it vllm/v1/sample/rejection_sampler.py, sampler.py, metadata.py and "
                         "vllm/v1/spec_decode/{metadata,utils}.py; its rejection sampler is model runner v2's "
                         "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py (+ rejection_sampler_utils.py), another "
                         "API with in-kernel uniforms (tl.rand): the vllm-v1 adapter does not drive it"},
}



def _release(version: str) -> dict:
    """The known release ``version``; an InvalidValue (a ValueError) naming the known ones otherwise."""
    if version not in RELEASES:
        raise InvalidValue(f"vllm {version!r}: exactspec knows vllm {', '.join(sorted(RELEASES))} (each with its "
                           "wheel's published sha256; another release needs its sha256 and file list added to "
                           "RELEASES)")
    return RELEASES[version]

#: the files every known release's audited module needs (0.32.0's import closure, less :data:`STUBS`)
BASE_FILES = """
vllm/__init__.py vllm/_version.py vllm/env_override.py vllm/envs.py vllm/logger.py vllm/version.py
vllm/logging_utils/__init__.py vllm/logging_utils/formatter.py vllm/logging_utils/lazy.py
vllm/logging_utils/log_time.py vllm/logging_utils/torch_tensor.py vllm/logging_utils/uvicorn_logging.py
vllm/model_executor/__init__.py vllm/model_executor/parameter.py vllm/model_executor/warmup/__init__.py
vllm/model_executor/warmup/jit_warmup.py vllm/model_executor/warmup/jit_warmup_triton_helper.py
vllm/platforms/__init__.py vllm/platforms/interface.py vllm/plugins/__init__.py vllm/third_party/__init__.py
vllm/third_party/pynvml.py vllm/triton_utils/__init__.py vllm/triton_utils/importing.py
vllm/triton_utils/tensor_descriptor.py vllm/utils/__init__.py vllm/utils/gpu_sync_debug.py
vllm/utils/import_utils.py vllm/utils/math_utils.py vllm/utils/platform_utils.py vllm/utils/torch_utils.py
vllm/v1/__init__.py vllm/v1/outputs.py vllm/v1/sample/__init__.py vllm/v1/sample/metadata.py
vllm/v1/sample/ops/__init__.py vllm/v1/sample/ops/bad_words.py vllm/v1/sample/ops/logprobs.py
vllm/v1/sample/ops/penalties.py vllm/v1/sample/ops/topk_topp_sampler.py vllm/v1/sample/ops/topk_topp_triton.py vllm/v1/sample/rejection_sampler.py
vllm/v1/sample/sampler.py vllm/v1/spec_decode/__init__.py vllm/v1/spec_decode/metadata.py
vllm/v1/spec_decode/utils.py
""".split()
#: the wheel's files the audited module needs (its import closure, less :data:`STUBS`)


def files(version: str) -> list[str]:
    """The wheel's files the audited module of ``version`` needs (its import closure, less :data:`STUBS`)."""
    return BASE_FILES + list(_release(version)["extra_files"])

#: vLLM packages replaced by stubs: what the audited files import from them, and why it is not sampling math
STUBS = {
    "vllm.config": "PROCESSED_LOGPROBS_MODES (logprobs modes, copied as its literal value from the wheel's "
                   "vllm/config/model.py) and LogprobsMode (a type): engine configuration; importing the real "
                   "package pulls transformers, pydantic models and the whole engine",
    "vllm.compilation": "CUDAGraphStat: a type in vllm/v1/outputs.py's model-runner output (CUDA graphs)",
    "vllm.v1.core": "SchedulerOutput: a type in vllm/v1/outputs.py's model-runner output (the scheduler)",
    "vllm.v1.sample.logits_processor": "LogitsProcessors (a field type of SamplingMetadata) and "
                                       "MinTokensLogitsProcessor (an isinstance test over an empty list of "
                                       "processors in RejectionSampler.apply_logits_processors)",
    "vllm.v1.sample.thinking_budget_state": "ThinkingBudgetStateHolder: a field type of SamplingMetadata "
                                            "(None in the audits)",
    "vllm.v1.attention": "attention backends (AttentionBackendEnum in vllm/platforms/interface.py; helpers of "
                         "vllm/v1/spec_decode/utils.py's draft-proposal kernels)",
    "vllm._aiter_ops": "rocm_aiter_ops: ROCm's aiter kernels, which TopKTopPSampler asks is_enabled() on a platform "
                       "that is neither CUDA, CPU nor XPU (here: no GPU); the stub answers False, as a machine "
                       "without ROCm does, so the PyTorch-native sampler (forward_native) is chosen",
    "vllm.model_executor.layers": "apply_penalties (used only with repetition/frequency penalties, off in the "
                                  "audits)",
    "vllm.distributed": "tensor-parallel ranks (vllm/model_executor/parameter.py, logging scope)",
}

#: the few stub names that must answer something: written into the stub as they stand here
STUB_CODE = {
    "vllm._aiter_ops": (
        "\n\nclass rocm_aiter_ops:\n"
        "    \"\"\"ROCm's aiter kernels: not enabled (no ROCm here).\"\"\"\n\n"
        "    @staticmethod\n"
        "    def is_enabled():\n"
        "        return False\n"),
}

_STUB_INIT = '''"""STUB written by exactspec's exactspec.published, not a file of the vLLM wheel.

{why}.
Any name imported from here (or from a submodule) is a placeholder class that raises if it is called.
"""
import importlib.abc as _abc
import importlib.machinery as _machinery
import sys as _sys
import types as _types

{constants}
globals().update(_CONSTANTS.get(__name__, {{}}))
{code}


def _placeholder(qualname):
    def refuse(*args, **kwargs):
        raise NotImplementedError(qualname + " is a stub (exactspec.published): not part of the audited path")
    return type(qualname.rpartition(".")[2], (), {{"__init__": refuse, "__module__": qualname.rpartition(".")[0],
                                                  "__call__": refuse}})


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    value = _placeholder(__name__ + "." + name)
    globals()[name] = value
    return value


class _Finder(_abc.MetaPathFinder, _abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return _machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _types.ModuleType(spec.name, "STUB (exactspec.published)")

        def getattr_(name, module=module):
            if name.startswith("__"):
                raise AttributeError(name)
            value = _placeholder(module.__name__ + "." + name)
            setattr(module, name, value)
            return value
        module.__getattr__ = getattr_
        for key, value in _CONSTANTS.get(spec.name, {{}}).items():
            setattr(module, key, value)
        return module

    def exec_module(self, module):
        module.__path__ = []


_sys.meta_path.insert(0, _Finder())
'''


def cache_dir(version: str = DEFAULT_VERSION) -> str:
    """Where the subset of ``version`` lives by default: ``~/.cache/exactspec/vllm-<version>``.

    >>> cache_dir("0.32.0").endswith("vllm-0.32.0")
    True
    """
    return os.path.join(os.path.expanduser("~"), ".cache", "exactspec", f"vllm-{version}")


def _constants(wheel: zipfile.ZipFile) -> dict[str, dict]:
    """The literal constants the stubs must carry, read from the wheel's own source."""
    tree = ast.parse(wheel.read("vllm/config/model.py"))
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and any(
                getattr(t, "id", None) == "PROCESSED_LOGPROBS_MODES" for t in targets):
            value = ast.literal_eval(node.value)
            return {"vllm.config.model": {"PROCESSED_LOGPROBS_MODES": value}}
    raise ReleaseUnsupported("PROCESSED_LOGPROBS_MODES not found in the wheel's vllm/config/model.py: the stubs "
                             "cannot carry it (a release whose config moved needs its file list revised)")


def fetch(version: str = DEFAULT_VERSION, directory: str | None = None, *, quiet: bool = True) -> str:
    """Download vllm==version's wheel (no dependencies), unpack :func:`files` and write :data:`STUBS`; return the
    directory to put on ``sys.path`` (reused when already there)."""
    release = _release(version)
    if release.get("absent"):
        raise ReleaseUnsupported(release["absent"])
    needed = files(version)
    root = directory or cache_dir(version)
    done = os.path.join(root, "COMPLETE")
    spec = hashlib.sha256(repr((version, needed, STUBS, STUB_CODE, _STUB_INIT)).encode()).hexdigest()[:16]
    if os.path.exists(done):
        with open(done) as fh:
            if f"subset={spec}" in fh.read():
                return root
        shutil.rmtree(root)         # made by another version of this script: made again
    os.makedirs(root, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", tmp,
               f"vllm=={version}"]
        subprocess.run(cmd + (["-q"] if quiet else []), check=True)
        wheel_path, = glob.glob(os.path.join(tmp, f"vllm-{version}-*.whl"))
        digest = hashlib.sha256()
        with open(wheel_path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != release["sha256"]:
            raise ReleaseUnsupported(f"{os.path.basename(wheel_path)}: sha256 {digest.hexdigest()}, expected "
                                     f"{release['sha256']} (the wheel PyPI published for vllm {version}); not unpacked")
        staging = os.path.join(tmp, "subset")
        with zipfile.ZipFile(wheel_path) as wheel:
            for name in needed + [f"vllm-{version}.dist-info/METADATA"]:
                wheel.extract(name, staging)
            constants = _constants(wheel)
        for package, why in STUBS.items():
            path = os.path.join(staging, *package.split("."), "__init__.py")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            table = {k: v for k, v in constants.items() if k == package or k.startswith(package + ".")}
            text = _STUB_INIT.format(why=why, constants=f"_CONSTANTS = {table!r}", code=STUB_CODE.get(package, ""))
            with open(path, "w") as fh:
                fh.write(text)
        for name in os.listdir(staging):
            target = os.path.join(root, name)
            if os.path.exists(target):
                shutil.rmtree(target)
            shutil.move(os.path.join(staging, name), target)
    with open(done, "w") as fh:
        fh.write(f"vllm=={version} sha256={digest.hexdigest()} subset={spec}\n")
    return root


def load(version: str = DEFAULT_VERSION, directory: str | None = None) -> object:
    """``vllm.v1.sample.rejection_sampler`` imported from the subset, its Triton kernels interpreted on CPU."""
    root = fetch(version, directory)
    os.environ["TRITON_INTERPRET"] = "1"
    if root not in sys.path:
        sys.path.insert(0, root)
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        import vllm.v1.sample.rejection_sampler as module
        from vllm.triton_utils import HAS_TRITON
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old
    import triton.language as tl
    if type(tl.zeros).__name__ != "InterpretedFunction":
        raise RuntimeError("triton was imported before TRITON_INTERPRET=1 was set: its own @jit helpers (tl.zeros) are "
                           "compiled functions and vLLM's interpreted kernels cannot call them; set TRITON_INTERPRET=1 "
                           "before anything imports triton (tests/conftest.py does)")
    if not HAS_TRITON:
        raise RuntimeError("vLLM disabled Triton (vllm.triton_utils.HAS_TRITON is False): its kernels would be "
                           "placeholders; is triton installed (tests/published.txt)?")
    return module
