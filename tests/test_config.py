"""RunConfig validation: every refusal names the field and what is allowed."""
import pytest

from gnnrec_lab.config import RunConfig
from gnnrec_lab.errors import ConfigError
from gnnrec_lab.optim import lr_at


@pytest.mark.parametrize("field,value,needle", [
    ("layers", 0, "layers"), ("layers", 65, "1 to 64"), ("dim", 0, "dim"), ("dim", -3, ">= 1"),
    ("batch_size", 0, "batch_size"), ("model", "gat", "lightgcn"), ("backend", "cuda", "native"),
    ("optimizer", "rmsprop", "lamb"), ("lr", 0, "positive"), ("memory_mode", "hbm", "optane_app_direct"),
    ("placement", {"weights": "dram"}, "tensor class"), ("placement", {"embeddings": "ssd"}, "file:DIR"),
    ("placement", {"embeddings": ""}, "file:DIR"), ("placement", {"embeddings": "numa:membind: 1"}, "NODES"),
    ("placement", {"graph": "numa:interleave:2-1"}, "NODES"), ("placement", {"graph": "file: "}, "directory"),
    ("fanouts", (0, 1), "fanouts"), ("target_recall", 1.5, "(0, 1]"), ("layers", True, "layers"),
])
def test_bad_values_name_the_field(field, value, needle):
    with pytest.raises(ConfigError) as e:
        RunConfig(**{field: value})
    assert e.value.param == field
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_mf_has_zero_layers_and_roundtrip():
    c = RunConfig(model="mf", layers=0)
    assert RunConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError):
        RunConfig(model="mf", layers=2)
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({"bogus": 1})
    assert e.value.param == "bogus"


def test_lr_rules_warmup_and_schedule():
    c = RunConfig(lr=1e-3, batch_size=8192, ref_batch_size=2048, lr_rule="sqrt")
    assert c.effective_lr == pytest.approx(2e-3)
    assert RunConfig(lr=1e-3, batch_size=8192, lr_rule="linear").effective_lr == pytest.approx(4e-3)
    w = RunConfig(lr=1.0, warmup_steps=4, schedule="cosine")
    lrs = [lr_at(s, w, steps_per_epoch=10, total_steps=14) for s in range(14)]
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4] == pytest.approx(1.0) and lrs[-1] < 0.05
    assert all(a >= b for a, b in zip(lrs[3:], lrs[4:]))
    e = RunConfig(lr=1.0, warmup_epochs=0.5)
    assert lr_at(0, e, steps_per_epoch=10, total_steps=100) == pytest.approx(0.2)


def test_placement_flag_keeps_commas_inside_a_place():
    from gnnrec_lab.commands.common import _parse_placement
    assert _parse_placement("embeddings=numa:interleave:0,1,optimizer=file:/tmp") == {
        "embeddings": "numa:interleave:0,1", "optimizer": "file:/tmp"}
