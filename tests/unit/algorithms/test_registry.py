"""Registry behaviour and the names the algorithms package registers."""

from __future__ import annotations

from typing import Any

import pytest

from nexrl.trainer.algorithms import (
    ADVANTAGE_ESTIMATORS,
    KL_CONTROLLERS,
    KL_PENALTIES,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    ROLLOUT_CORRECTIONS,
    Registry,
    UnknownNameError,
    advantages,
    kl,
    policy_loss,
)


def test_register_get_names_roundtrip() -> None:
    reg: Registry[Any] = Registry("colour")

    @reg.register("red")
    def red() -> int:
        return 1

    reg.register("blue")(2)  # non-callables are fine too
    assert reg.get("red") is red
    assert reg.get("red")() == 1
    assert reg.get("blue") == 2
    assert reg.names() == ["blue", "red"]
    assert "red" in reg and "green" not in reg
    assert len(reg) == 2
    assert list(reg) == ["blue", "red"]


def test_register_returns_target_unchanged() -> None:
    reg: Registry[type] = Registry("thing")

    class Thing:
        pass

    assert reg.register("thing")(Thing) is Thing


def test_duplicate_name_is_rejected() -> None:
    reg: Registry[int] = Registry("colour")
    reg.register("red")(1)
    with pytest.raises(ValueError, match="'red' is already registered"):
        reg.register("red")(2)
    assert reg.get("red") == 1


@pytest.mark.parametrize("bad", ["", None, 3])
def test_register_rejects_non_string_names(bad: object) -> None:
    reg: Registry[int] = Registry("colour")
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register(bad)  # type: ignore[arg-type]


def test_unknown_name_error_names_registry_suggestion_and_choices() -> None:
    with pytest.raises(UnknownNameError) as info:
        ADVANTAGE_ESTIMATORS.get("grop")
    err = info.value
    message = str(err)
    assert message.startswith("unknown advantage estimator 'grop';")
    assert "did you mean 'grpo'?" in message
    for name in ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        assert repr(name) in message
    assert err.kind == "advantage estimator"
    assert err.name == "grop"
    assert err.valid == ADVANTAGE_ESTIMATORS.names()


def test_unknown_name_error_is_key_error_and_value_error() -> None:
    with pytest.raises(KeyError):
        POLICY_LOSSES.get("ppo")
    with pytest.raises(ValueError):
        POLICY_LOSSES.get("ppo")


def test_no_suggestion_when_nothing_is_close() -> None:
    with pytest.raises(UnknownNameError) as info:
        KL_PENALTIES.get("zzzzzzzz")
    assert "did you mean" not in str(info.value)
    assert "valid names: 'abs', 'k1'" in str(info.value)


def test_empty_registry_message() -> None:
    with pytest.raises(UnknownNameError, match=r"valid names: \(none registered\)"):
        Registry[int]("widget").get("x")


def test_unhashable_name_raises_unknown_name_error() -> None:
    with pytest.raises(UnknownNameError):
        KL_CONTROLLERS.get(["adaptive"])  # type: ignore[arg-type]


def _builtin(registry: Any) -> list[str]:
    """The names the package registers (a plugin a test in this process imported, e.g.
    tests/unit/config/test_plugins.py, registers its own next to them)."""
    return [n for n in registry.names() if registry.get(n).__module__.startswith("nexrl.")]


def test_package_registers_every_algorithm() -> None:
    assert _builtin(ADVANTAGE_ESTIMATORS) == [
        "dr_grpo",
        "gae",
        "grpo",
        "nstep",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "rloo",
    ]
    assert _builtin(POLICY_LOSSES) == ["gspo", "importance_sampling", "ppo_clip"]
    assert _builtin(KL_PENALTIES) == ["abs", "k1", "k2", "k3", "kl", "low_var_kl", "mse"]
    assert _builtin(KL_CONTROLLERS) == ["adaptive", "fixed"]
    assert _builtin(LOSS_AGGREGATIONS) == [
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
        "token-mean",
    ]
    assert _builtin(ROLLOUT_CORRECTIONS) == ["mis", "tis"]


def test_registered_objects_are_the_module_functions() -> None:
    assert ADVANTAGE_ESTIMATORS.get("grpo") is advantages.grpo
    assert ADVANTAGE_ESTIMATORS.get("rloo") is advantages.rloo
    assert POLICY_LOSSES.get("ppo_clip") is policy_loss.ppo_clip
    assert POLICY_LOSSES.get("gspo") is policy_loss.gspo
    assert KL_PENALTIES.get("k3") is KL_PENALTIES.get("low_var_kl") is kl.kl_low_var
    assert KL_PENALTIES.get("k1") is KL_PENALTIES.get("kl") is kl.kl_k1
    assert KL_PENALTIES.get("k2") is KL_PENALTIES.get("mse") is kl.kl_mse
    assert KL_CONTROLLERS.get("adaptive") is kl.AdaptiveKLController
    assert KL_CONTROLLERS.get("fixed") is kl.FixedKLController
