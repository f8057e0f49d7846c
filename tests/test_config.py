"""RunConfig validation: every refusal names the field and what is allowed."""
import pytest

from gnnrec_lab.config.run import RunConfig
from gnnrec_lab.models.optim import lr_at
from gnnrec_lab.models.registry import NGCF_FORMS
from gnnrec_lab.util.errors import ConfigError


@pytest.mark.parametrize("field,value,needle", [
    ("layers", 0, "layers"), ("layers", 65, "1 to 64"), ("dim", 0, "dim"), ("dim", -3, "from 1 to"),
    ("batch_size", 0, "batch_size"), ("model", "gat", "lightgcn"), ("backend", "cuda", "native"),
    ("optimizer", "rmsprop", "lamb"), ("lr", 0, "> 0"), ("memory_mode", "hbm", "optane_app_direct"),
    ("placement", {"weights": "dram"}, "tensor class"), ("placement", {"embeddings": "ssd"}, "file:DIR"),
    ("placement", {"embeddings": ""}, "file:DIR"), ("placement", {"embeddings": "numa:membind: 1"}, "NODES"),
    ("placement", {"graph": "numa:interleave:2-1"}, "NODES"), ("placement", {"graph": "file: "}, "directory"),
    ("fanouts", (0, 1), "fanouts"), ("target_recall", 1.5, "> 0 and <= 1"), ("layers", True, "layers"),
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


# -- the words every view shows for a field (config.FIELD_DOCS) ---------------------------------
import re  # noqa: E402

from gnnrec_lab.config import run as C  # noqa: E402

FIELDS = list(C.OPTIONS)   # RunConfig's fields and the models' own options
# the allowed values each choice field's help must list, so a value added to a tuple is documented
CHOICES = {"model": C.MODELS, "ngcf_form": NGCF_FORMS, "optimizer": C.OPTIMIZERS, "lr_rule": C.LR_RULES,
           "schedule": C.SCHEDULES, "backend": C.BACKENDS, "precision": C.PRECISIONS, "mode": C.MODES,
           "cache_policy": C.CACHE_POLICIES, "memory_mode": C.MEMORY_MODES, "placement": C.TENSOR_CLASSES}


def _words(text: str) -> set:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def test_every_field_has_a_label_and_a_help_text_in_words():
    assert set(C.FIELD_DOCS) == set(FIELDS)           # none missing, none left for a removed field
    for name in FIELDS:
        label, help_ = C.field_label(name), C.FIELD_DOCS[name].help
        assert label[0].isupper() and "_" not in label and label != name, (name, label)
        # the help says more than the flag's own words ("batch size" for --batch-size is not help)
        assert len(_words(help_) - _words(name) - _words(label)) >= 4, (name, help_)
    for name, allowed in CHOICES.items():
        missing = [v for v in allowed if v not in C.FIELD_DOCS[name].help]
        assert not missing, (name, missing)


def test_field_help_shows_the_default_in_words():
    assert C.field_help("batch_size").endswith("(default: 2048)")
    assert C.field_help("fanouts").endswith("(default: 10,10,10)")
    assert C.field_help("epochs", 5).endswith("(default: 5)")        # a view's own default
    assert C.field_help("eval_users").endswith("(default: all users)")
    assert C.field_help("placement").endswith("(default: every class in DRAM)")
    for name in FIELDS:                                                  # never "None" or "{}"
        assert not re.search(r"\(default: (None|\{\}|\(\)|)\)$", C.field_help(name)), C.field_help(name)


@pytest.mark.parametrize("given", ["dim", ["dim", 64], None, 3])
def test_from_dict_refuses_what_is_not_a_mapping_naming_its_type(given):
    with pytest.raises(ConfigError, match=f"expected a dict of RunConfig fields, got {type(given).__name__}"):
        RunConfig.from_dict(given)
