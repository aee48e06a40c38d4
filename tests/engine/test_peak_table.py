"""The datasheet peak MFU is measured against: each GPU recognised by the name torch gives it,
told apart from its siblings (NVL and PCIe from SXM, L40S from L40 from L4, A10G from A10 from
A100), with the precision the run's matmuls use (bf16, TF32 for a float32 run when it is on,
else plain fp32), and the source printed as the run reports it."""

from __future__ import annotations

import pytest
import torch

from engine.plan.flops import PEAK_TFLOPS, device_peak, fp32_matmul_uses_tf32, table_peak

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32

# (torch.cuda.get_device_name, part, bf16, tf32, fp32): dense TFLOP/s from the datasheets
# (NVIDIA's "with sparsity" tensor figures halved), as engine/plan/flops.py cites them
DATASHEET = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.5, 494.5, 67.0),  # 1,979* / 989* sparse
    ("NVIDIA H100 SXM5 80GB", "H100 SXM", 989.5, 494.5, 67.0),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.5, 378.0, 51.0),  # 1,513* / 756* sparse
    ("NVIDIA H100 NVL", "H100 NVL", 835.5, 417.5, 60.0),  # 1,671* / 835* sparse
    ("NVIDIA H200", "H200 SXM", 989.5, 494.5, 67.0),
    ("NVIDIA H200 NVL", "H200 NVL", 835.5, 417.5, 60.0),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM", 312.0, 156.0, 19.5),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM", 312.0, 156.0, 19.5),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe", 312.0, 156.0, 19.5),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe", 312.0, 156.0, 19.5),
    ("NVIDIA A100 80GB", "A100", 312.0, 156.0, 19.5),  # no form factor named: the same figures
    ("NVIDIA B200", "B200", 2250.0, 1100.0, 75.0),  # HGX B200: 4.5 PF* / 2.2 PF* sparse
    ("NVIDIA GB200", "GB200", 2500.0, 1250.0, 80.0),  # GB200 NVL72: 5 PF* / 2.5 PF* sparse
    ("NVIDIA GeForce RTX 5090", "RTX 5090", 209.5, 104.8, 104.8),  # fp32 accumulate
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell", 500.0, 250.0, 125.0),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000 Blackwell", 500.0, 250.0, 125.0),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTX PRO 6000 Blackwell Max-Q", 438.9, 219.4, 110.0),
    ("NVIDIA L4", "L4", 121.0, 60.0, 30.3),  # 242* / 120* sparse
    ("NVIDIA L40S", "L40S", 362.05, 183.0, 91.6),
    ("NVIDIA L40", "L40", 181.05, 90.5, 90.5),
    ("NVIDIA A10", "A10", 125.0, 62.5, 31.2),
    ("NVIDIA A10G", "A10G", 70.0, 35.0, 35.0),
    ("NVIDIA GeForce RTX 3090", "RTX 3090", 71.0, 35.6, 35.6),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 165.2, 82.6, 82.6),
    ("NVIDIA RTX A6000", "RTX A6000", 154.8, 77.4, 38.7),
]  # fmt: skip


@pytest.mark.parametrize(("device_name", "part", "bf16", "tf32", "fp32"), DATASHEET)
def test_each_gpu_reads_its_datasheet_figure_for_each_precision(
    device_name: str, part: str, bf16: float, tf32: float, fp32: float
) -> None:
    def peak(dtype: torch.dtype, uses_tf32: bool) -> tuple[float, str]:
        found = table_peak(device_name, dtype, tf32=uses_tf32)
        assert found is not None, device_name
        return found.flops / 1e12, found.source

    assert peak(BF16, True) == (pytest.approx(bf16), f"table: {part} bf16")
    assert peak(FP16, False) == (pytest.approx(bf16), f"table: {part} fp16")
    assert peak(FP32, True) == (pytest.approx(tf32), f"table: {part} tf32")
    assert peak(FP32, False) == (pytest.approx(fp32), f"table: {part} fp32")


def test_every_entry_of_the_table_is_tested() -> None:
    tested = {part for _, part, *_ in DATASHEET}
    untested_here = {"V100S PCIe", "V100 SXM2", "V100 PCIe", "T4"}  # the next test's
    assert {e.part for e in PEAK_TFLOPS} == tested | untested_here


def test_parts_without_tf32_or_bf16_tensor_cores_fall_back_to_what_they_have() -> None:
    v100 = "Tesla V100-SXM2-16GB"
    assert table_peak(v100, FP16, tf32=True).source == "table: V100 SXM2 fp16"
    assert table_peak(v100, FP16, tf32=True).flops == 125e12
    # no TF32 on Volta: a float32 run is plain fp32 whatever the setting
    assert table_peak(v100, FP32, tf32=True).flops == 15.7e12
    bf16 = table_peak(v100, BF16, tf32=True)  # no bf16 tensor cores: not the fp16 figure
    assert bf16.flops == 15.7e12 and bf16.source == "table: V100 SXM2 fp32 (no bf16 tensor cores)"
    assert table_peak("Tesla V100-PCIE-32GB", FP16, tf32=False).flops == 112e12
    assert table_peak("Tesla V100S-PCIE-32GB", FP16, tf32=False).flops == 130e12
    assert table_peak("Tesla T4", FP16, tf32=True).flops == 65e12
    assert table_peak("Tesla T4", FP32, tf32=True).flops == 8.1e12


@pytest.mark.parametrize(
    "device_name",
    [
        "Some Future GPU",
        "NVIDIA GH200 480GB",  # not an H200: no figure of its own here, so it is measured
        "NVIDIA GeForce RTX 4090 D",  # cut-down variants are not their full siblings
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 5090 D",
        "NVIDIA RTX 6000 Ada Generation",  # not the RTX PRO 6000 Blackwell, nor an RTX A6000
        "NVIDIA A40",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a slice of the part, not the part: measured
    ],
)
def test_an_unknown_or_unlisted_gpu_has_no_table_figure(device_name: str) -> None:
    assert table_peak(device_name, BF16, tf32=True) is None


def test_the_run_s_tf32_setting_decides_a_float32_peak() -> None:
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert not fp32_matmul_uses_tf32()
        torch.set_float32_matmul_precision("high")  # what allow_tf32 = True amounts to
        assert fp32_matmul_uses_tf32()
    finally:
        torch.set_float32_matmul_precision(before)


def test_a_float32_run_on_cuda_is_measured_against_tf32_when_the_run_enabled_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _device=None: "NVIDIA H100 PCIe")
    cuda = torch.device("cuda", 0)  # named only: no GPU is touched
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert device_peak(cuda, FP32).source == "table: H100 PCIe tf32"
        torch.set_float32_matmul_precision("highest")
        assert device_peak(cuda, FP32).source == "table: H100 PCIe fp32"
    finally:
        torch.set_float32_matmul_precision(before)
    assert device_peak(cuda, BF16).flops == 756.5e12


def test_a_cpu_peak_is_measured_whatever_the_precision() -> None:
    peak = device_peak(torch.device("cpu"), FP32, tf32=True)
    assert peak.source.startswith("measured") and peak.flops > 0
