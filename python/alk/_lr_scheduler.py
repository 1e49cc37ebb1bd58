"""alk.optim.lr_scheduler: torch.optim.lr_scheduler's everyday classes over param groups.

Each scheduler sets group["lr"] for every group of the optimizer at construction (step 0) and
at every step(), with PyTorch's closed forms:

    sched = alk.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    for ...: loss.backward(); opt.step(); sched.step()
"""
import math

from . import _C


class LRScheduler:
    """Base: subclasses give the learning rate of each group at epoch self.last_epoch."""

    def __init__(self, optimizer, last_epoch=-1):
        if last_epoch != -1:
            raise NotImplementedError(f"{type(self).__name__}: resuming with last_epoch is not supported by alk "
                                      f"(at {_C._caller()})")
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            dict.setdefault(g, "initial_lr", g["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = -1
        self.step()

    def lr_at(self, base_lr, epoch):
        raise NotImplementedError

    def get_last_lr(self):
        """The learning rate of each group after the latest step()."""
        return list(self._last_lr)

    def step(self):
        """Advances one epoch (or step) and sets each group's learning rate."""
        self.last_epoch += 1
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = self.lr_at(base, self.last_epoch)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        """The scheduler's state (everything but the optimizer)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not callable(v)}

    def load_state_dict(self, state):
        """Restores state_dict()."""
        self.__dict__.update(state)


class StepLR(LRScheduler):
    """lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """lr * gamma ** (the number of milestones reached)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** sum(1 for m in self.milestones if epoch >= m)


class ExponentialLR(LRScheduler):
    """lr * gamma ** epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return base_lr * self.gamma ** epoch


class CosineAnnealingLR(LRScheduler):
    """eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, epoch):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LambdaLR(LRScheduler):
    """lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"Expected {n} lr_lambdas, but got {len(self.lr_lambdas)} (at {_C._caller()})")
        self._group = 0
        super().__init__(optimizer, last_epoch)

    def step(self):
        """Advances one epoch (or step) and sets each group's learning rate."""
        self.last_epoch += 1
        for g, base, fn in zip(self.optimizer.param_groups, self.base_lrs, self.lr_lambdas):
            g["lr"] = base * fn(self.last_epoch)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


class OneCycleLR(LRScheduler):
    """PyTorch's one-cycle policy: cosine (or linear) warm-up from max_lr / div_factor to max_lr over
    pct_start of the steps, then annealing to max_lr / div_factor / final_div_factor."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError(f"You must define either total_steps OR (epochs AND steps_per_epoch) "
                                 f"(at {_C._caller()})")
            total_steps = epochs * steps_per_epoch
        if three_phase:
            raise NotImplementedError(f"OneCycleLR: three_phase is not supported by alk (at {_C._caller()})")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', got {anneal_strategy!r} "
                             f"(at {_C._caller()})")
        # Momentum cycling needs the optimizer's betas/momentum to change per step, which alk's
        # C++ optimizers fix at construction: refused rather than silently skipped.
        if cycle_momentum:
            raise NotImplementedError(f"OneCycleLR: cycle_momentum=True is not supported by alk (the momentum is "
                                      f"fixed at construction); pass cycle_momentum=False (at {_C._caller()})")
        n = len(optimizer.param_groups)
        max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * n
        self.total_steps, self.anneal = total_steps, anneal_strategy
        self.phase_end = float(pct_start * total_steps) - 1
        for g, m in zip(optimizer.param_groups, max_lrs):
            dict.__setitem__(g, "initial_lr", m / div_factor)
            dict.__setitem__(g, "max_lr", m)
            dict.__setitem__(g, "min_lr", m / div_factor / final_div_factor)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def step(self):
        """Advances one step and sets each group's learning rate."""
        self.last_epoch += 1
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is "
                             f"{self.total_steps} (at {_C._caller()})")
        for g in self.optimizer.param_groups:
            if step <= self.phase_end:
                lr = self._anneal(g["initial_lr"], g["max_lr"], step / self.phase_end)
            else:
                lr = self._anneal(g["max_lr"], g["min_lr"],
                                  (step - self.phase_end) / (self.total_steps - 1 - self.phase_end))
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]
