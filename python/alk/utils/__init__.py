"""alk.utils: torch.utils' names (alk.utils.data: Dataset, TensorDataset, DataLoader)."""
from . import data  # noqa: F401
