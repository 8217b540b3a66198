"""A launcher that forgot its optimizer: the command exits 2 and names it."""

import torch

mesh = {"tp": 2}


def model():
    return torch.nn.Linear(4, 4)


def parallelize(module, device_mesh):
    return module


def inputs():
    return (torch.ones(2, 4),)


def loss(output):
    return output.sum()
