"""Small torch models the Python tests share (test_torch.py, test_fleet.py)."""

import torch


class TinyEncoder(torch.nn.Module):
    """Token ids + key padding mask -> logits: padding-invariant (masked attention)."""

    def __init__(self, vocab=40, d=16, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, ids, mask):
        return self.head(self.enc(self.emb(ids), src_key_padding_mask=mask))
