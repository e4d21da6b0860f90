"""Code examples in docs/ run as written."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from nexrl.core.config.errors import RecipeError
from nexrl.driver.modeling.tiny import save_tiny_model
from nexrl.driver.recipe import load_recipe_checked
from nexrl.trainer.algorithms import ADVANTAGE_ESTIMATORS


def python_blocks(doc: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", Path(doc).read_text(), re.S)


def test_developer_guide_registers_an_advantage_estimator_in_a_plugin(tmp_path: Path) -> None:
    (block,) = [
        b for b in python_blocks("docs/developer-guide.md") if b.startswith("# my_algorithms.py")
    ]
    text = Path("docs/developer-guide.md").read_text()
    (lines,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "plugins:" in b]
    shown: Any = OmegaConf.to_container(OmegaConf.create(lines))
    # The recipe lines, on a copy of the default recipe next to the plugin file.
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(Path("recipes/max_digit/max_digit_tiny.yaml").read_text())
    ((file,),) = [shown["plugins"]]
    (tmp_path / file).write_text(block)
    estimator = shown["algorithm"]["advantage_estimator"]
    try:
        checked = load_recipe_checked(
            recipe, [f"plugins=[{file}]", f"algorithm.advantage_estimator={estimator}"]
        )
        assert checked.plugins == (str(tmp_path / file),)
        fn = ADVANTAGE_ESTIMATORS.get(estimator)
    finally:  # unit test files share a process: leave the registry as it was
        ADVANTAGE_ESTIMATORS._entries.pop(estimator, None)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 3.0]])  # scores 1 and 3, mean 2
    mask = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    adv, _ = fn(rewards, mask, torch.tensor([0, 0]))
    assert torch.equal(adv, torch.tensor([[-1.0, -1.0], [0.0, 1.0]]))


def test_user_guide_shows_the_default_recipes_evaluator_verbatim() -> None:
    blocks = python_blocks("docs/user-guide.md")
    assert Path("recipes/max_digit/evaluator.py").read_text() in blocks


def test_user_guide_shows_the_calculator_agent_config_and_tools_verbatim() -> None:
    text = Path("docs/user-guide.md").read_text()
    yaml_blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert Path("recipes/calculator/agent_config.yaml").read_text() in yaml_blocks
    assert Path("recipes/calculator/custom_tools.py").read_text() in python_blocks(
        "docs/user-guide.md"
    )


def test_user_guide_shows_the_calculator_recipes_warm_start_settings() -> None:
    text = Path("docs/user-guide.md").read_text()
    blocks: list[Any] = [
        OmegaConf.to_container(OmegaConf.create(textwrap.dedent(b)))
        for b in re.findall(r"```yaml\n(.*?)```", text, re.S)
        if "warm_start:" in b
    ]
    (shown,) = [b["model"]["tiny"]["warm_start"] for b in blocks]
    shipped = load_recipe_checked("recipes/calculator/calculator_agent_tiny.yaml").cfg
    assert shown == OmegaConf.to_container(shipped.model.tiny.warm_start)


def test_user_guide_shows_the_openai_agent_recipe_and_function_verbatim() -> None:
    text = Path("docs/user-guide.md").read_text()
    section = text[text.index("### Or let `nexrl train` run the agent") :]
    (recipe_block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)[:1]
    assert recipe_block in Path("recipes/openai_agent/openai_agent_tiny.yaml").read_text()
    assert Path("recipes/openai_agent/agent.py").read_text() in python_blocks("docs/user-guide.md")


def test_developer_guide_adds_a_recipe_check_in_a_plugin(tmp_path: Path) -> None:
    from nexrl.core.config.checks import CHECKS

    (block,) = [b for b in python_blocks("docs/developer-guide.md") if "@register_check" in b]
    plugin = tmp_path / "my_checks.py"
    plugin.write_text(block)
    recipe = "recipes/max_digit/max_digit_tiny.yaml"
    try:
        with pytest.raises(RecipeError) as info:
            load_recipe_checked(recipe, [f"plugins=[{plugin}]", "trainer.lr=2.0"])
        assert info.value.problems == ["trainer.lr (2.0): 1.0 or more diverges; try 1e-5 to 1e-2"]
        assert load_recipe_checked(recipe, [f"plugins=[{plugin}]", "trainer.lr=0.5"])
    finally:  # unit test files share a process: the check goes with this test
        for name in [n for n, fn in CHECKS.items() if fn.__name__ == "lr_below_one"]:
            del CHECKS[name]


def _algorithms_section() -> str:
    text = Path("docs/user-guide.md").read_text()
    start = text.index("## Algorithms")
    return text[start : text.index("\n## ", start + 1)]


def test_user_guide_algorithm_examples_resolve_as_described(tmp_path: Path) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", _algorithms_section(), re.S)
    assert len(blocks) == 4
    resolved = []
    for block in blocks:
        recipe = tmp_path / "recipe.yaml"
        base = OmegaConf.load("recipes/max_digit/max_digit_tiny.yaml")
        recipe.write_text(OmegaConf.to_yaml(OmegaConf.merge(base, OmegaConf.create(block))))
        resolved.append(load_recipe_checked(recipe).cfg.algorithm)
    gspo, dr_grpo, ppo, corrected = resolved
    assert (ppo.advantage_estimator, ppo.lam) == ("gae", 1.0)  # its trainer: the test below
    assert (gspo.clip_ratio_low, gspo.clip_ratio_high) == (3e-4, 4e-4)
    assert gspo.loss_agg_mode == "seq-mean-token-mean"
    assert dr_grpo.loss_agg_mode == "seq-mean-token-sum-norm" and not dr_grpo.norm_adv_by_std
    assert dr_grpo.loss_norm_length == 1  # max_digit's rollout_worker.max_response_length
    rc = corrected.rollout_correction
    assert (rc.mode, rc.level, rc.threshold) == ("mis", "sequence", 2.0)


def test_user_guide_print_config_shows_the_resolved_algorithm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from nexrl.driver.cli.train import main

    (command,) = [
        b
        for b in re.findall(r"```\n(.*?)```", _algorithms_section(), re.S)
        if "--print-config" in b
    ]
    # the command of "Running a recipe" (there is no `nexrl` executable to run)
    runner = "./pants run src/python/nexrl:train -- "
    assert command.startswith(runner), command
    args = command[len(runner) :].split()
    assert main(args) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.algorithm.clip_ratio_low == 3e-4 and printed.algorithm.clip_ratio_high == 4e-4
    assert printed.algorithm.loss_agg_mode == "seq-mean-token-mean"


def test_user_guide_defaults_table_matches_the_registered_functions() -> None:
    from nexrl.trainer.algorithms import POLICY_LOSSES
    from nexrl.trainer.algorithms.defaults import keyword_defaults

    rows = re.findall(
        r"^\| `policy_loss: (\w+)` \| ([^|]*) \| `([^`]*)` \|", _algorithms_section(), re.M
    )
    built_in = {  # not the plugins other tests of this process registered
        n for n in POLICY_LOSSES.names() if POLICY_LOSSES.get(n).__module__.startswith("nexrl.")
    }
    assert {name for name, _, _ in rows} == built_in
    for name, bounds, mode in rows:
        defaults = keyword_defaults(POLICY_LOSSES.get(name))
        assert defaults["loss_agg_mode"] == mode
        if "clip_ratio_low" in defaults:
            low, high = (float(b) for b in bounds.split("(")[0].split("/"))
            assert (low, high) == (defaults["clip_ratio_low"], defaults["clip_ratio_high"])
        else:
            assert bounds.strip() == "(none)"


def _sft_section() -> str:
    text = Path("docs/user-guide.md").read_text()
    start = text.index("## Supervised fine-tuning from a dataset")
    return text[start : text.index("\n## ", start + 1)]


def test_user_guide_sft_blocks_are_the_shipped_recipes_and_they_check(
    tiny_model_dir: Path,
) -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", _sft_section(), re.S)
    sft = Path("recipes/max_digit_sft/sft_tiny.yaml").read_text()
    rl = Path("recipes/max_digit_sft/grpo_from_sft.yaml").read_text()
    assert len(blocks) == 3
    assert blocks[0] in sft and blocks[1] in sft and blocks[2] in rl
    assert load_recipe_checked("recipes/max_digit_sft/sft_tiny.yaml").cfg.mode == "sft"
    # the RL recipe checks once its model.path exists (here: a tiny model in its place)
    rl_cfg = load_recipe_checked(
        "recipes/max_digit_sft/grpo_from_sft.yaml", [f"model.path={tiny_model_dir}"]
    ).cfg
    shown: Any = OmegaConf.to_container(OmegaConf.create(blocks[2]))
    assert shown["model"]["path"] == "runs/max_digit_sft"  # the SFT run's folder
    assert rl_cfg.mode == "rl" and rl_cfg.validate.validate_before_train


def test_user_guide_sft_data_line_and_its_label_mask(tmp_path: Path) -> None:
    from nexrl.driver.modeling import build_tokenizer
    from nexrl.trainer.sft_data import encode_files

    (line,) = re.findall(r"```json\n(.*?)\n```", _sft_section(), re.S)
    train = Path("recipes/max_digit_sft/data/train.jsonl")
    assert train.read_text().splitlines()[0] == line
    vocab = list(load_recipe_checked("recipes/max_digit_sft/sft_tiny.yaml").cfg.model.tiny.vocab)
    tok: Any = build_tokenizer(vocab, byte_fallback=False)
    stop = [int(tok.convert_tokens_to_ids("<|im_end|>"))]
    ((ids, mask),) = encode_files(tok, [train], "data.data_files", 64, stop)[:1]
    assert tok.decode([t for t, m in zip(ids, mask, strict=True) if m]) == "4<|im_end|>"
    # the guide's bad-row message, for a row 7 whose answer is not a string
    rows = train.read_text().splitlines()[:7]
    rows[6] = '{"messages": [{"role": "user", "content": "max 1 2 3"}, ' + (
        '{"role": "assistant", "content": 3}]}'
    )
    bad = tmp_path / "train.jsonl"
    bad.write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError) as err:
        encode_files(tok, [bad], "data.data_files", 64, stop)
    shown = re.search(r"`(data\.data_files: .*?)`", _sft_section())
    assert shown is not None
    expected = shown.group(1).replace("recipes/max_digit_sft/data/train.jsonl", str(bad))
    assert str(err.value) == expected


def test_trainer_guide_lora_settings_are_a_valid_recipe_section() -> None:
    text = Path("docs/trainer.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "lora:" in b]
    shown: Any = OmegaConf.to_container(OmegaConf.create(block))
    lora = shown["trainer"]["lora"]
    overrides = [f"trainer.lr={shown['trainer']['lr']}"] + [
        f"trainer.lora.{k}=[{','.join(v)}]" if isinstance(v, list) else f"trainer.lora.{k}={v}"
        for k, v in lora.items()
    ]
    checked = load_recipe_checked(Path("recipes/max_digit/max_digit_tiny.yaml"), overrides)
    assert OmegaConf.to_container(checked.cfg.trainer.lora) == {
        **lora,
        "alpha": 16.0,
        "modules_to_save": [],
    }


def _flat(prefix: str, node: Any) -> list[str]:
    if isinstance(node, dict):
        return [o for k, v in node.items() for o in _flat(f"{prefix}{k}.", v)]
    return [f"{prefix[:-1]}={str(node).lower() if isinstance(node, bool) else node}"]


def test_cluster_guide_tls_commands_make_files_its_recipe_lines_accept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex
    import subprocess

    text = Path("docs/cluster.md").read_text()
    section = text[text.index("## TLS") : text.index("## Kubernetes")]
    monkeypatch.setenv("NEXRL_TOKEN", "guide-token")  # the Slurm block's bearer token
    (commands,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    for line in commands.splitlines():  # the guide's openssl lines, as written
        subprocess.run(shlex.split(line), cwd=tmp_path, check=True, capture_output=True)
    blocks: list[Any] = [
        OmegaConf.to_container(OmegaConf.create(b))
        for b in re.findall(r"```yaml\n(.*?)```", section, re.S)
    ]
    assert [b["cluster"].get("type", "local") for b in blocks] == ["local", "slurm", "address"]
    for shown in blocks:
        lines = [o.replace("/shared/tls", str(tmp_path)) for o in _flat("", shown)]
        tls = load_recipe_checked(Path("recipes/max_digit/max_digit_tiny.yaml"), lines).cfg
        got = OmegaConf.to_container(tls.cluster.tls)
        assert {k: v for k, v in got.items() if v} == {  # type: ignore[union-attr]
            k: str(v).replace("/shared/tls", str(tmp_path)) if isinstance(v, str) else v
            for k, v in shown["cluster"]["tls"].items()
        }
    # The guide's files, with a key that is not the certificate's: one line, named.
    lines = [o.replace("/shared/tls", str(tmp_path)) for o in _flat("", blocks[1])]
    lines = [o.replace("nexrl.key", "ca.key") for o in lines]
    with pytest.raises(RecipeError) as err:
        load_recipe_checked(Path("recipes/max_digit/max_digit_tiny.yaml"), lines)
    (problem,) = err.value.problems
    assert problem.startswith("cluster.tls.cert/key:")


def test_trainer_guide_custom_trainer_overrides_the_public_hooks() -> None:
    import warnings

    (block,) = [b for b in python_blocks("docs/trainer.md") if "class MyTrainer" in b]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an old hook name (_prepare_batch) would warn
        namespace: dict[str, Any] = {}
        exec(compile(block, "docs/trainer.md", "exec"), namespace)
    assert "prepare_batch" in vars(namespace["MyTrainer"])


def test_user_guide_shows_the_ppo_recipes_settings_and_they_check() -> None:
    text = Path("docs/user-guide.md").read_text()
    section = text[text.index("**PPO with a value model.**") :]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)[:1]
    shown: Any = OmegaConf.to_container(OmegaConf.create(block))
    checked = load_recipe_checked("recipes/max_digit/max_digit_ppo.yaml").cfg
    assert shown["trainer"]["type"] == checked.trainer.type == "self_hosted_ppo"
    for key, value in shown["trainer"]["critic"].items():
        assert checked.trainer.critic[key] == value, key
    for key, value in shown["algorithm"].items():
        assert checked.algorithm[key] == value, key
    with pytest.raises(RecipeError, match="needs a value model"):
        load_recipe_checked(
            "recipes/max_digit/max_digit_tiny.yaml", ["algorithm.advantage_estimator=nstep"]
        )


def _staged_section() -> str:
    text = Path("docs/user-guide.md").read_text()
    start = text.index("## Staged training")
    return text[start : text.index("\n## ", start + 1)]


def test_user_guide_staged_training_shows_the_shipped_recipe_its_refusal_and_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The section's recipe lines are stage 2's; in a checkout where stage 1 has no
    snapshot yet, stage 2's ``--check`` refuses with the section's line; the parent
    record shown has the fields a run records."""
    from nexrl.core.weights.snapshot import SnapshotPublisher
    from nexrl.driver.modeling.parent import resolve_model_source

    section = _staged_section()
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert block in Path("recipes/top_two/top_two_stage2.yaml").read_text()
    (line,) = [x[4:] for x in section.splitlines() if x.startswith("    model.path: ")]
    repo = Path.cwd()
    stage1 = tmp_path / "runs" / "top_two_stage1"
    (stage1 / "snapshots").mkdir(parents=True)  # stage 1 started, published nothing yet
    (tmp_path / "recipes").symlink_to(repo / "recipes")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeError) as err:
        load_recipe_checked("recipes/top_two/top_two_stage2.yaml")
    expected = line.replace("/home/me/nexrl", str(tmp_path.resolve()))
    assert expected in err.value.problems
    # the parent record: the fields the guide shows, in that order
    (shown,) = re.findall(r"```json\n(.*?)```", section, re.S)
    vocab = ["top", *"0123456789"]
    model = save_tiny_model(tmp_path / "model", vocab=vocab, byte_fallback=False)
    import transformers

    loaded = transformers.AutoModelForCausalLM.from_pretrained(model)
    SnapshotPublisher(stage1 / "snapshots").publish(loaded.state_dict(), loaded.config, 200)
    (stage1 / "config.yaml").write_text("experiment_name: top_two_stage1\n")
    parent = resolve_model_source("runs/top_two_stage1", stage1).parent
    assert parent is not None
    assert list(parent) == list(json.loads(shown.replace('..."', '"')))
    assert parent["experiment_name"] == "top_two_stage1" and parent["version"] == 200
