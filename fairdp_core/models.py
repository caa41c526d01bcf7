"""The study's models (docs/study.md, 'Models'): LR, MLP, the MNIST CNN, a small UTKFace CNN, and for the DP-SGD
utility check the DP-SGD material's ReLU CNN for MNIST (``cnn_relu``) and its CIFAR-10 CNN (``cnn`` on 3x32x32
inputs).

Each is an ordinary ``torch.nn.Module`` (usable with Opacus), built by :func:`build_model`. No BatchNorm (it mixes
samples; the CIFAR CNN has GroupNorm in its place); the study's CNNs use tanh, as Papernot et al.'s
tempered-sigmoid networks (arXiv 2007.14191), and max pooling.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

__all__ = ["MLP", "MODELS", "CifarCNN", "LogisticRegression", "MnistCNN", "MnistReLUCNN", "ModelName", "UTKFaceCNN",
           "build_model"]

ModelName = Literal["lr", "mlp", "cnn", "cnn_relu"]
MODELS: tuple[str, ...] = ("lr", "mlp", "cnn", "cnn_relu")


class LogisticRegression(nn.Module):
    """Multinomial logistic regression: one linear layer on the flattened input. Logits [n, n_classes]."""

    def __init__(self, in_features: int, n_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


class MLP(nn.Module):
    """One hidden layer (256 by default), tanh. Logits [n, n_classes]."""

    def __init__(self, in_features: int, n_classes: int, hidden: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


class MnistCNN(nn.Module):
    """conv 16@5x5 (stride 2, pad 2) -> pool -> conv 32@4x4 (stride 2) -> pool -> fc 32 -> fc n_classes, tanh.

    The tempered-sigmoid network of Papernot et al. (arXiv 2007.14191, Table 1) with the 5x5 first kernel that
    the study specifies (docs/study.md, 'Models'); pooling is 2x2 with stride 1. Input [n, 1, 28, 28].
    """

    def __init__(self, n_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 5, stride=2, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 4, stride=2)
        self.fc1 = nn.Linear(32 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.conv1(x))  # [n, 16, 14, 14]
        x = nn.functional.max_pool2d(x, 2, 1)  # [n, 16, 13, 13]
        x = torch.tanh(self.conv2(x))  # [n, 32, 5, 5]
        x = nn.functional.max_pool2d(x, 2, 1)  # [n, 32, 4, 4]
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


class UTKFaceCNN(nn.Module):
    """A small CNN for 48x48 grayscale faces: two conv-tanh-pool blocks, GroupNorm-free, fc 64 -> classes."""

    def __init__(self, n_classes: int = 2, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 5, stride=2, padding=2)  # 24x24
        self.conv2 = nn.Conv2d(16, 32, 3, stride=1, padding=1)  # 12x12 after pool
        self.fc1 = nn.Linear(32 * 6 * 6, 64)
        self.fc2 = nn.Linear(64, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.tanh(self.conv1(x)), 2)  # [n, 16, 12, 12]
        x = nn.functional.max_pool2d(torch.tanh(self.conv2(x)), 2)  # [n, 32, 6, 6]
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


class MnistReLUCNN(nn.Module):
    """The DP-SGD material's MNIST CNN: conv 16@3x3 -> max-pool 2 -> conv 32@3x3 -> max-pool 2 -> dense 32 ->
    dense n_classes, ReLU (no padding). Input [n, 1, 28, 28]: 26 -> 13 -> 11 -> 5, so the flattened map is 32·5·5."""

    def __init__(self, n_classes: int = 10, in_channels: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3)
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.fc1 = nn.Linear(32 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)  # [n, 16, 13, 13]
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)  # [n, 32, 5, 5]
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class CifarCNN(nn.Module):
    """The DP-SGD material's CIFAR-10 CNN with GroupNorm in place of BatchNorm (BatchNorm mixes samples): three
    blocks of two conv 3x3 (32, 64, 128 channels, padding 1) each followed by GroupNorm(8 groups) and ReLU, with a
    2x2 max-pool after each block; then dense 128 and dense n_classes. Input [n, 3, 32, 32]."""

    def __init__(self, n_classes: int = 10, in_channels: int = 3, groups: int = 8) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for width in (32, 64, 128):
            for _ in range(2):
                layers += [nn.Conv2d(c, width, 3, padding=1), nn.GroupNorm(groups, width), nn.ReLU()]
                c = width
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.fc1 = nn.Linear(128 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(self.features(x).flatten(1))))


def build_model(name: str, input_shape: tuple[int, ...], n_classes: int, *, hidden: int = 256) -> nn.Module:
    """The model ``name`` ('lr', 'mlp', 'cnn' or 'cnn_relu') for inputs of ``input_shape`` (without the batch
    dimension).

    'cnn' is :class:`MnistCNN` for 28x28 inputs, :class:`UTKFaceCNN` for 48x48 ones and :class:`CifarCNN` for
    3x32x32 ones; 'cnn_relu' is :class:`MnistReLUCNN` (28x28 only).
    """
    d = 1
    for s in input_shape:
        d *= s
    if name == "lr":
        return LogisticRegression(d, n_classes)
    if name == "mlp":
        return MLP(d, n_classes, hidden)
    if name == "cnn":
        if tuple(input_shape[1:]) == (28, 28):
            return MnistCNN(n_classes, input_shape[0])
        if tuple(input_shape[1:]) == (48, 48):
            return UTKFaceCNN(n_classes, input_shape[0])
        if tuple(input_shape[1:]) == (32, 32):
            return CifarCNN(n_classes, input_shape[0])
        raise ValueError(f"no CNN defined for input shape {input_shape}; expected (C, 28, 28), (C, 48, 48) or "
                         "(C, 32, 32)")
    if name == "cnn_relu":
        if tuple(input_shape[1:]) == (28, 28):
            return MnistReLUCNN(n_classes, input_shape[0])
        raise ValueError(f"cnn_relu is defined for (C, 28, 28) inputs, got {input_shape}")
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
