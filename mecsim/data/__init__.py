"""Datasets as tensors, partitions across clients, and per-client index splits."""

from mecsim.data.datasets import DATASETS, Dataset, dataset_shape, load_dataset
from mecsim.data.federated import ClientData, build_client_data
from mecsim.data.partition import PARTITIONS, lognormal_weights

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
