"""The glossary of the Chinese edition: each English field term, its Chinese term, what it means here.

``docs-zh/glossary.md`` shows it (``tests/test_translations.py`` holds the page to this list),
and the search plugin's jieba user dictionary (``i18n/jieba_user_dict.txt``, written by
``python -m i18n dict --write``) is made of its Chinese terms, so that jieba keeps 镜像变量 and
优化器状态 whole in the search index instead of cutting them into 镜像 / 变量 and 优化器 / 状态.
The Chinese terms follow the community's usage and TensorFlow's zh-cn documentation (副本,
镜像变量, 分片, ...); the translators' brief fixes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_DICT = ROOT / "i18n" / "jieba_user_dict.txt"


@dataclass(frozen=True)
class Term:
    """One glossary row: the English term, the Chinese as written on the pages, and a line on it."""

    english: str
    chinese: str
    meaning: str


TERMS: tuple[Term, ...] = (
    Term("GPU memory", "显存", "一块 GPU 自己的内存；显存从不在多卡之间合并成一个池。"),
    Term("out of memory (OOM)", "显存不足 (OOM)", "分配器拿不出一块张量所需的字节，TensorFlow 报 ResourceExhaustedError。"),
    Term("multi-GPU / single machine multi-GPU", "多卡 / 单机多卡", "一台机器上的几块 GPU，本站的例子是 4 x V100-32GB。"),
    Term("data parallelism", "数据并行", "每张卡一份完整的模型，各自处理一部分批次；MirroredStrategy 就是这种。"),
    Term("model parallelism", "模型并行", "把模型本身拆到几张卡上，每张卡只放一部分。"),
    Term("tensor parallelism", "张量并行", "模型并行的一种：把一个权重矩阵切成分片，每张卡只放一片。"),
    Term("mixed precision", "混合精度", "用 float16 计算、变量仍为 float32（mixed_float16），变量不会因此变小。"),
    Term("gradient accumulation", "梯度累积", "几个小批次的梯度累加后再更新一次，降低的是激活值，不是权重。"),
    Term("gradient checkpointing, rematerialisation", "梯度检查点, 重计算", "反向传播时重算激活值，而不是一直存着它们。"),
    Term("optimizer state", "优化器状态", "优化器为每个变量保存的量（如 RMSprop 的均方值），与变量同形状。"),
    Term("activations", "激活值", "前向传播中各层的输出，反向传播要用；它们通常随批大小线性增长（批内两两配对计算的损失，例如对比损失，会增长得更快）。"),
    Term("replica", "副本", "分布式策略在一个设备上运行的一份模型。"),
    Term("mirrored variable", "镜像变量", "MirroredStrategy 下的变量：每个副本一份完整拷贝，每步保持一致。"),
    Term("shard", "分片", "一个变量被切开后放在某个设备上的那一块。"),
    Term("mesh", "网格", "DTensor 或 Keras 分布式 API 中按轴排列的一组设备。"),
    Term("layout", "布局", "一个张量的各个轴在网格上怎样切分或复制。"),
    Term("slot (optimizer slot)", "槽变量 (slot)", "优化器为一个变量建的附属变量，如动量；每个槽变量与变量一样大。"),
    Term("allocator", "分配器", "TensorFlow 管理一块设备内存的组件（GPU 上是 BFC 分配器）。"),
    Term("peak", "峰值", "一个训练步中某设备同时占用的最大字节数。"),
    Term("placement", "放置方式", "变量和计算放在哪些设备上、各放多少。"),
    Term("parameter server", "参数服务器", "把变量放在专门的 ps 任务上、由 worker 读取的训练方式。"),
    Term("offload", "卸载 (offload)", "把变量放在主机内存里而不是显存里。"),
    Term("kernel (a layer's weight matrix)", "权重矩阵 (kernel)", "Dense 层的权重，本站的例子是 [131072, 65536] float32，32 GiB。"),
    Term("batch / batch size", "批次 / 批大小", "一步训练处理的一组样本，及其样本数。"),
    Term("training step", "训练步", "一次前向、反向和参数更新。"),
    Term("weights / gradients", "权重 / 梯度", "模型的变量，及损失对它们的导数（与变量同形状）。"),
    Term("emulate / emulation", "模拟", "没有 GPU 时用逻辑 CPU 和设了上限的分配器扮演 GPU。"),
    Term("logical device", "逻辑设备", "TensorFlow 在一个物理设备上划出的设备，如 CPU:1 到 CPU:4。"),
    Term("verdict", "结论", "放得下还是显存不足，由规划器或实际运行给出。"),
)


def words(term: Term) -> list[str]:
    """The Chinese words of a term, without the English in parentheses.

    >>> words(Term("x", "梯度检查点, 重计算", "")), words(Term("x", "槽变量 (slot)", ""))
    (['梯度检查点', '重计算'], ['槽变量'])
    """
    text = re.sub(r"\s*\([^)]*\)", "", term.chinese)
    return [word.strip() for word in re.split(r"[/,，]", text) if word.strip()]


def user_dict() -> str:
    """The jieba user dictionary: one Chinese glossary word a line (jieba then suggests a frequency
    that keeps the word whole, ``jieba.Tokenizer.add_word``)."""
    seen: list[str] = []
    for term in TERMS:
        seen.extend(word for word in words(term) if word not in seen)
    return "".join(f"{word}\n" for word in seen)
