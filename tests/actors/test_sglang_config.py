"""SGLangConfig: the ``sglang.launch_server`` command line it renders and the fields it refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actors.sglang_config import READINESS_PATH, SGLangConfig, launch_server_argv


def test_sglang_config_renders_real_flags_and_names_bad_fields() -> None:
    config = SGLangConfig(
        model_path="/models/m",
        port=30000,
        tp_size=2,
        base_gpu_id=4,
        mem_fraction_static=0.7,
        nccl_port=31000,
        dist_init_addr="10.0.0.1:5000",
        random_seed=3,
        context_length=4096,
        extra_args=["--disable-cuda-graph"],
    )
    argv = launch_server_argv(config, python="python")
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--model-path"] == "/models/m" and pairs["--tp-size"] == "2" and pairs["--base-gpu-id"] == "4"
    assert pairs["--mem-fraction-static"] == "0.7" and pairs["--nccl-port"] == "31000"
    assert pairs["--dist-init-addr"] == "10.0.0.1:5000" and pairs["--random-seed"] == "3"
    assert pairs["--context-length"] == "4096" and argv[-1] == "--disable-cuda-graph"
    assert READINESS_PATH == "/health_generate"
    with pytest.raises(ValidationError, match="frozen"):
        config.port = 1  # type: ignore[misc]
    for bad, field in [
        ({"tp_sise": 2}, "tp_sise"),
        ({"mem_fraction_static": 1.5}, "mem_fraction_static"),
        ({"dist_init_addr": "nohost"}, "dist_init_addr"),
        ({"extra_args": ["--port=1"]}, "extra_args"),
    ]:
        with pytest.raises(ValidationError, match=field):
            SGLangConfig(model_path="m", port=1, **bad)
