"""Datasets as tensors, partitions across clients, and per-client index splits."""

from mecsim.learning.data.datasets import DATASETS, Dataset, dataset_shape, load_dataset
from mecsim.learning.data.federated import ClientData, build_client_data
from mecsim.learning.data.partition import PARTITIONS, lognormal_weights

__all__ = [
    "DATASETS",
    "PARTITIONS",
    "ClientData",
    "Dataset",
    "build_client_data",
    "dataset_shape",
    "load_dataset",
    "lognormal_weights",
]
