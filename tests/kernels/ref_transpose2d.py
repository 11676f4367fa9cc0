"""NumPy reference for transpose2d: each row's F1 x F2 block, transposed."""


def transpose2d(in_tensor, F1=4, F2=6):
    P = in_tensor.shape[0]
    return in_tensor.reshape(P, F1, F2).transpose(0, 2, 1).reshape(P, F1 * F2)
