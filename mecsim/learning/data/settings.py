"""The ``[data]`` section: the dataset, its partition across clients, each client's splits.

These are the settings :mod:`mecsim.learning.data.federated` reads; they live beside it,
as the network's and the protocols' settings live beside theirs. The scenario
(:mod:`mecsim.config.scenario`) composes them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from mecsim.common.section import Section


class DataConfig(Section):
    """Dataset, partition across clients, and per-client splits."""

    dataset: str = Field(default="digits", description="dataset name (mecsim list datasets)")
    root: str | None = Field(default=None, description="directory holding torchvision datasets")
    download: bool = Field(default=False, description="allow torchvision to download into root")
    partition: str = Field(
        default="dirichlet",
        description="how training data splits over clients (mecsim list partitions)",
    )
    alpha: float = Field(default=0.5, gt=0, description="Dirichlet concentration")
    min_classes: int = Field(
        default=1,
        ge=1,
        description="dirichlet_clients: a client's class mix averages this many Dir(alpha p) "
        "draws, each led by a class no earlier draw led, so at least this many classes share "
        "its data (at small alpha about equally); 1 is Hsu et al.'s single draw",
    )
    classes_per_client: int = Field(
        default=2, ge=1, description="pathological partition: label classes each client holds"
    )
    quantity_skew: Literal["none", "lognormal"] = Field(
        default="none", description="client dataset sizes: as the partition gives, or lognormal"
    )
    lognormal_sigma: float = Field(
        default=2.0, ge=0, description="quantity_skew = lognormal: sigma of the size draw"
    )
    min_samples: int = Field(
        default=2,
        ge=1,
        description="every client gets at least this many training samples (redraws)",
    )
    test_fraction: float = Field(
        default=0.2, gt=0, lt=1, description="share of the pool held out as the global test set"
    )
    val_fraction: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="share of each client's data kept as its validation split",
    )
    local_test_fraction: float = Field(
        default=0.25,
        gt=0,
        description="each client's local test set, as a share of its training size (same labels)",
    )
    local_split: Literal["test_pool", "own_data"] = Field(
        default="test_pool",
        description="where local test sets come from: 'test_pool', drawn from the test set "
        "with the client's training labels (SCD appendix B; local_test_fraction); "
        "'own_data', each client's partition split into train (a share drawn from "
        "train_share_choices), validation (val_fraction) and test (own_test_share), the rest "
        "unused (COMET appendix B: {0.1, 0.3, 0.4} / 0.1 / 0.5)",
    )
    train_share_choices: list[float] = Field(
        default=[0.1, 0.3, 0.4],
        min_length=1,
        description="local_split = own_data: each client's training share of its partition, "
        "drawn uniformly from these",
    )
    own_test_share: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="local_split = own_data: each client's local test share of its partition",
    )

    @field_validator("train_share_choices")
    @classmethod
    def _shares(cls, shares: list[float]) -> list[float]:
        if any(not 0 < x < 1 for x in shares):
            raise ValueError(f"{shares}: every share must lie in (0, 1)")
        return shares

    @model_validator(mode="after")
    def _own_split_fits(self) -> DataConfig:
        if self.local_split == "own_data":
            most = max(self.train_share_choices) + self.val_fraction + self.own_test_share
            if most > 1 + 1e-9:
                raise ValueError(
                    f"local_split = own_data: train share {max(self.train_share_choices)} + "
                    f"val_fraction {self.val_fraction} + own_test_share {self.own_test_share} "
                    "exceed 1; lower one of them"
                )
        return self

    public_size: int = Field(
        default=0,
        ge=0,
        description="samples held out of the training pool as the public split (algorithms "
        "that use public data; every client downloads it once)",
    )
    public_dataset: str | None = Field(
        default=None,
        description="draw the public split from this dataset instead (e.g. cifar100 for "
        "cifar10, as COMET); same input shape; the private data keeps every sample",
    )
    synthetic_alpha: float = Field(
        default=1.0,
        ge=0,
        description="synthetic dataset: model heterogeneity alpha (FedProx); it shifts every "
        "class's logit alike, so no label depends on it, as in FedProx's generator",
    )
    synthetic_beta: float = Field(
        default=1.0, ge=0, description="synthetic dataset: data heterogeneity beta (FedProx)"
    )
