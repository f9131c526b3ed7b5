"""Storages of spyre tensors: creation, sharing, resizing, copies and serialization, checked against
the same steps on CPU storages."""

import io

import torch


def floats(storage: torch.UntypedStorage) -> list[float]:
    return torch.tensor([], dtype=torch.float32).set_(storage.cpu()).tolist()


def test_storages_live_on_the_device_and_copy_both_ways():
    x = torch.arange(6.0, device="spyre")
    s = x.untyped_storage()
    assert s.device == torch.device("spyre", 0) and s.is_spyre and s.nbytes() == 24
    assert floats(s) == list(range(6))
    host = torch.arange(6.0).untyped_storage()
    back = host.spyre()
    assert back.device.type == "spyre" and floats(back) == floats(host)
    fresh = torch.UntypedStorage(16, device="spyre")
    assert fresh.device.type == "spyre" and fresh.nbytes() == 16
    z = torch.empty(3, device="spyre")
    z.untyped_storage().copy_(torch.ones(3).untyped_storage())
    assert z.tolist() == [1.0, 1.0, 1.0]


def test_views_share_their_storage_and_set_makes_new_views():
    x = torch.arange(6.0, device="spyre")
    v, w = x.view(2, 3), x[2:]
    assert v.untyped_storage().data_ptr() == w.untyped_storage().data_ptr() == x.data_ptr()
    w.mul_(10)  # written through one view, seen through the others
    assert x.tolist() == [0.0, 1.0, 20.0, 30.0, 40.0, 50.0]
    t = torch.empty(0, device="spyre").set_(x.untyped_storage(), 1, (2, 2), (2, 1))
    assert t.tolist() == torch.tensor(x.tolist()).as_strided((2, 2), (2, 1), 1).tolist()


def test_resizing_a_storage_keeps_its_contents():
    x = torch.arange(6.0, device="spyre")
    s = x.untyped_storage()
    s.resize_(48)
    assert s.nbytes() == 48 and floats(s)[:6] == list(range(6))
    s.resize_(8)
    assert floats(s) == [0.0, 1.0]


def test_save_and_load_keep_views_sharing_one_storage():
    x = torch.arange(6.0, device="spyre")
    buf = io.BytesIO()
    torch.save({"whole": x.view(2, 3), "tail": x[2:]}, buf)
    buf.seek(0)
    back = torch.load(buf)
    assert back["whole"].device.type == "spyre"
    assert back["whole"].untyped_storage().data_ptr() == back["tail"].untyped_storage().data_ptr()
    back["tail"].zero_()
    assert back["whole"].flatten().tolist() == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert on_cpu["whole"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
