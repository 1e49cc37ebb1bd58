"""The loss modules of torch.nn: functional's losses with their arguments fixed at construction."""
from . import functional
from . import Module


class _Loss(Module):
    """A loss module: the functional form with the arguments given at construction."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = functional._reduction(reduction, size_average, reduce, type(self).__name__)


class CrossEntropyLoss(_Loss):
    """functional.cross_entropy (class dim 1) as a module."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):  # noqa: A002
        return functional.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                                        reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_Loss):
    """functional.nll_loss (class dim 1) as a module."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):  # noqa: A002
        return functional.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                                   reduction=self.reduction)


class MSELoss(_Loss):
    """functional.mse_loss as a module."""

    def forward(self, input, target):  # noqa: A002
        return functional.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """functional.l1_loss as a module."""

    def forward(self, input, target):  # noqa: A002
        return functional.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """functional.smooth_l1_loss as a module."""

    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):  # noqa: A002
        return functional.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class BCELoss(_Loss):
    """functional.binary_cross_entropy as a module."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):  # noqa: A002
        return functional.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """functional.binary_cross_entropy_with_logits as a module."""

    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):  # noqa: A002
        return functional.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                           pos_weight=self.pos_weight)
