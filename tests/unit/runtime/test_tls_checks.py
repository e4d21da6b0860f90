"""``cluster.tls`` mistakes are caught when the recipe is loaded, before any cluster
starts: one line each, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexrl.core.config.errors import RecipeError
from nexrl.driver.recipe import load_recipe_checked

DEFAULT = "recipes/max_digit/max_digit_tiny.yaml"


def problems_of(*overrides: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_checked(DEFAULT, list(overrides))
    return info.value.problems


def pem_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) and its key, as files."""
    from distributed import Security

    sec = Security.temporary()
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    cert.write_text(sec.tls_scheduler_cert)
    key.write_text(sec.tls_scheduler_key)
    return cert, key


def files(ca: Path, cert: Path, key: Path) -> list[str]:
    return [f"cluster.tls.ca_file={ca}", f"cluster.tls.cert={cert}", f"cluster.tls.key={key}"]


def test_tls_is_off_by_default_and_valid_settings_load(tmp_path: Path) -> None:
    cfg = load_recipe_checked(DEFAULT).cfg
    assert (cfg.cluster.tls.temporary, cfg.cluster.tls.ca_file) == (False, None)
    load_recipe_checked(DEFAULT, ["cluster.tls.temporary=true"])
    cert, key = pem_pair(tmp_path, "run")
    loaded = load_recipe_checked(DEFAULT, files(cert, cert, key)).cfg.cluster.tls
    assert (loaded.ca_file, loaded.cert, loaded.key) == (str(cert), str(cert), str(key))


def test_a_missing_file_names_its_field(tmp_path: Path) -> None:
    cert, _ = pem_pair(tmp_path, "run")
    gone = tmp_path / "nope.key"
    (problem,) = problems_of(*files(cert, cert, gone))
    assert problem.startswith(f"cluster.tls.key: '{gone}' does not exist")


def test_a_folder_is_not_a_readable_file(tmp_path: Path) -> None:
    cert, key = pem_pair(tmp_path, "run")
    assert problems_of(*files(tmp_path, cert, key)) == [
        f"cluster.tls.ca_file: '{tmp_path}' is not a readable file; fix its path or mode"
    ]


def test_files_come_as_a_set_of_three(tmp_path: Path) -> None:
    cert, _ = pem_pair(tmp_path, "run")
    (problem,) = problems_of(f"cluster.tls.cert={cert}")
    assert problem.startswith("cluster.tls.ca_file: required when cluster.tls.cert is set")


def test_a_key_of_another_certificate_is_refused(tmp_path: Path) -> None:
    cert, _ = pem_pair(tmp_path, "run")
    _, other_key = pem_pair(tmp_path, "other")
    (problem,) = problems_of(*files(cert, cert, other_key))
    assert problem.startswith(
        f"cluster.tls.cert/key: '{cert}' and '{other_key}' are not a PEM certificate and "
        "its private key"
    )


def test_a_ca_file_that_is_not_pem_is_refused(tmp_path: Path) -> None:
    cert, key = pem_pair(tmp_path, "run")
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    (problem,) = problems_of(*files(junk, cert, key))
    assert problem.startswith(f"cluster.tls.ca_file: '{junk}' is not a PEM CA certificate")


def test_temporary_and_files_together_are_refused(tmp_path: Path) -> None:
    cert, key = pem_pair(tmp_path, "run")
    (problem,) = problems_of("cluster.tls.temporary=true", *files(cert, cert, key))
    assert problem.startswith("cluster.tls.temporary: set either temporary: true or the files")


def test_an_existing_scheduler_needs_files_and_a_tls_address(tmp_path: Path) -> None:
    (problem,) = problems_of(
        "cluster.type=address", "cluster.address=tls://h:8786", "cluster.tls.temporary=true"
    )
    assert problem.startswith("cluster.tls.temporary: a scheduler nexrl did not start")
    cert, key = pem_pair(tmp_path, "run")
    assert problems_of(
        "cluster.type=address", "cluster.address=tcp://h:8786", *files(cert, cert, key)
    ) == [
        "cluster.address: 'tcp://h:8786' with cluster.tls set must be a tls:// address "
        "(e.g. tls://scheduler:8786)"
    ]
    load_recipe_checked(
        DEFAULT, ["cluster.type=address", "cluster.address=tls://h:8786", *files(cert, cert, key)]
    )


def test_kubernetes_says_tls_is_not_wired_there() -> None:
    (problem,) = problems_of(
        "cluster.type=kubernetes",
        "cluster.tls.temporary=true",
        "service.inference_service.api_key=tok",  # off-node servers need a token (Security)
    )
    assert problem.startswith("cluster.tls: not wired for cluster.type 'kubernetes'")
