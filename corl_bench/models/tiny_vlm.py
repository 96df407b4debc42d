"""Tiny random-weight checkpoints of real Hugging Face vision-language architectures, built locally (no download):
for CPU tests and demos of the code paths a real VLM takes (its processor, chat template, image-token layout and
``*ForConditionalGeneration`` class), where the hub is out of reach and a real checkpoint would be gigabytes.

    from corl_bench.models.tiny_vlm import ARCHS, build
    path = build("llava", tmp_path / "llava", seed=0)   # -> the folder
    processor = AutoProcessor.from_pretrained(path, backend="pil")
    model = AutoModelForImageTextToText.from_pretrained(path)

A built folder is an ordinary ``save_pretrained`` folder: the model (float32, random weights from ``seed``, well
under 1 MB), the model's real processor class with the PIL backend of its image processor (the torchvision one does
not import next to the CPU torch), the chat template of the family it mimics, a ``generation_config.json`` with its
eos / pad ids, and a tokenizer of its own: byte-level (every byte is one token, no merges, so any text encodes without
an unknown token; ``"\\n\\n"`` is two tokens where real tokenizers have one), ahead of it the family's leading special
tokens (at their real ids for Llama-2 and Gemma: ``<unk> <s> </s>`` = 0..2, ``<pad> <eos> <bos> <unk>`` = 0..3) and
after it the family's other special tokens (image and turn markers); the model's vocabulary is exactly the
tokenizer's length. A family whose tokenizer adds ``<bos>`` keeps doing so. The weights are random: outputs are
noise; only shapes, token layouts and code paths are real.

==============  ===========================================  ==================================================
arch            mimics (model class)                         tiny settings (text: hidden 64, 2 layers, 4 heads,
                                                             2 kv heads; vision: hidden 32, 2 layers, 2 heads)
==============  ===========================================  ==================================================
``qwen2-vl``    Qwen/Qwen2-VL-2B-Instruct                    4-px patches, 2x2 merge, images of 16x16 to 32x32
                (``Qwen2VLForConditionalGeneration``)        px: (h/8)(w/8) ``<|image_pad|>`` between
                                                             ``<|vision_start|>`` and ``<|vision_end|>``; M-RoPE
``qwen2.5-vl``  Qwen/Qwen2.5-VL-3B-Instruct                  the same layout; windowed vision attention (window
                (``Qwen2_5_VLForConditionalGeneration``)     16 px, layer 1 full), an MLP merger
``internvl``    OpenGVLab/InternVL3_5-2B-HF                  32-px tiles (1-4 and a thumbnail), 4-px patches,
                (``InternVLForConditionalGeneration``)       pixel shuffle 0.5: 16 ``<IMG_CONTEXT>`` per tile
                                                             between ``<img>`` and ``</img>``; Qwen2 text
``llava-        llava-hf/llava-onevision-qwen2-0.5b-ov-hf    SigLIP tower, 32 px, 8-px patches (all 16 kept),
onevision``     (``LlavaOnevisionForConditionalGeneration``) any-res tiles of 32 px and a base view
                                                             (``anyres_max_9``); Qwen2 text and chat template
``llava``       llava-hf/llava-1.5-7b-hf                     CLIP tower, 32 px, 8-px patches, CLS dropped
                (``LlavaForConditionalGeneration``)          (``default`` strategy, layer -2): 16 tokens per
                                                             image; Llama text; ``USER: <image>\\n... ASSISTANT:``
``llava-next``  llava-hf/llava-v1.6-mistral-7b-hf            the same tower; any-res tiles of 32 px (pinpoints
                (``LlavaNextForConditionalGeneration``)      32x64, 64x32, 64x64): the token count follows the
                                                             image size; Mistral text; ``[INST] <image>\\n...``
``idefics3``    HuggingFaceM4/Idefics3-8B-Llama3             SigLIP-like tower, 32 px, 4-px patches, pixel
                (``Idefics3ForConditionalGeneration``)       shuffle x2: 16 tokens per 32-px tile; images resized
                                                             to longest edge 64, split in 32-px tiles + a global
                                                             view; Llama text
``smolvlm``     HuggingFaceTB/SmolVLM-256M-Instruct          Idefics3's image path (32-px tiles, pixel shuffle x2,
                (``SmolVLMForConditionalGeneration``)        a global view), SmolVLM's processor (it needs the
                                                             ``num2words`` package) and ``<|im_start|>`` template
``gemma3``      google/gemma-3-4b-it                         SigLIP tower, 32 px, 4-px patches pooled to 16 soft
                (``Gemma3ForConditionalGeneration``)         tokens between ``<start_of_image>`` and
                                                             ``<end_of_image>``; Gemma-3 text (a sliding and a
                                                             full attention layer)
==============  ===========================================  ==================================================

A prompt is the chat template's rendering: the LLaVA and LLaVA-NeXT templates write no ``<s>`` (the tokenizer adds
it), the Idefics3 and Gemma-3 ones write their ``<bos>`` themselves, so ``processor(text=rendered, ...)`` needs
``add_special_tokens=False`` for those two (``apply_chat_template(tokenize=True)`` decides so itself) or the prompt
starts with two of them, as with the real checkpoints.

The Qwen2-VL, Qwen2.5-VL, InternVL, LLaVA-OneVision and SmolVLM processor classes take a video processor, which
transformers (5.24) has for the torchvision backend only; they are built and loaded without it
(:func:`corl_bench.models.hf_vlm.without_video`), as every real checkpoint of those families is.

Nothing here imports torch or transformers at module level.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

__all__ = ["ARCHS", "UNAVAILABLE", "TinyArch", "build", "noise_image"]

TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 1024}
"""the language model of every arch"""
VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
"""the vision tower of every arch"""
TILE = 32  # pixels per side of what a vision tower sees


@dataclass(frozen=True)
class TinyArch:
    """One buildable architecture: what it mimics and the classes its folder loads as."""

    name: str
    mimics: str
    """the real checkpoint family whose processor settings, special tokens and chat template it copies"""
    model_class: str
    processor_class: str
    image_processor_class: str
    image_token: str
    """the token the processor repeats once per image feature"""


# ----------------------------------------------------------------------------------------------- chat templates
# The families' own templates (as their hub checkpoints ship them; LLaVA-NeXT's in the form of transformers' conversion
# script), kept as they are apart from accepting a plain string as a message's content where the original only reads
# content lists. Note Idefics3's (and SmolVLM's): "User:" before an image that opens the turn, "User: " otherwise.
LLAVA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] + ' ' }}{% else %}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] + ' '}}"
    "{% endfor %}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] + ' '}}{% endgeneration %}{% endfor %}{% endif %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)
LLAVA_NEXT_TEMPLATE = (  # llava-v1.6-mistral-7b-hf
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<<SYS>>\n' + (message['content'] if message['content'] is string else message['content'][0]['text'])"
    " + '\n<</SYS>>\n\n' }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}"
    "{# Render all text next #}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{% endif %}{{' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + (message['content'] if message['content'] is string else message['content'][0]['text']) + '</s>'}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)
IDEFICS3_TEMPLATE = (  # Idefics3-8B-Llama3 (SmolVLM's is the same after <|im_start|>)
    "<|begin_of_text|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
SMOLVLM_TEMPLATE = "<|im_start|>" + IDEFICS3_TEMPLATE.removeprefix("<|begin_of_text|>")  # SmolVLM-*-Instruct
QWEN2_VL_TEMPLATE = (  # Qwen2-VL-*-Instruct / Qwen2.5-VL-*-Instruct (images and text in the order given)
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content %}{% set image_count.value = image_count.value + 1 %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

INTERNVL_TEMPLATE = (  # OpenGVLab/InternVL3-*-hf (a Qwen2 chat; each image is <IMG_CONTEXT> and a newline)
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' %}"
    "{{ '<IMG_CONTEXT>\n' }}{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}{{'<|im_end|>\n'}}{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}"
    "{% endif %}")

LLAVA_ONEVISION_TEMPLATE = (  # llava-hf/llava-onevision-qwen2-*-ov-hf (images before the text of a turn)
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\n' }}{% endfor %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{% endif %}{{'<|im_end|>\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{'<|im_start|>assistant\n' }}{% endif %}")

GEMMA3_TEMPLATE = (  # gemma-3-*-it
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)


# ----------------------------------------------------------------------------------------------- the tokenizer
def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte value 0..255 (what the ByteLevel pre-tokenizer emits)."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in kept}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _tokenizer(head: Sequence[str], tail: Sequence[str], *, bos: str | None, eos: str, pad: str,
               unk: str | None = None, add_bos: bool = False, named: dict[str, str] | None = None) -> Any:
    """A byte-level tokenizer: the special tokens ``head`` (ids 0..), the 256 bytes, the special tokens ``tail``.

    ``add_bos``: encoding puts ``bos`` in front (as Llama / Gemma tokenizers do); ``named``: model-specific special
    tokens the processor reads as tokenizer attributes (Gemma-3's ``boi_token``, ``image_token``...)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(head)}
    for ch in _byte_chars():
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (*head, *tail)])
    if add_bos and bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1", special_tokens=[(bos, vocab[bos])])
    extra: Any = dict(named) if named else [t for t in tail if t not in (bos, eos, pad, unk)]
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad, unk_token=unk,
                                   extra_special_tokens=extra, padding_side="left",
                                   model_max_length=TEXT["max_position_embeddings"])


def _ids(tok: Any) -> dict[str, Any]:
    """The special ids a text config carries, and the whole vocabulary (added tokens included)."""
    return {"vocab_size": len(tok), "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id}


def _llama_tokenizer() -> Any:
    """llava-hf's Llama-2 tokenizer: ``<unk> <s> </s>`` first, ``<image>`` and ``<pad>`` added, ``<s>`` added."""
    return _tokenizer(("<unk>", "<s>", "</s>"), ("<image>", "<pad>"), bos="<s>", eos="</s>", pad="<pad>",
                      unk="<unk>", add_bos=True)


# ----------------------------------------------------------------------------------------------- builders
# Each returns (model, processor, generation-config overrides); the weights come from the torch RNG build() seeded.
def _build_llava() -> tuple[Any, Any, dict[str, Any]]:
    import transformers as tf
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tok = _llama_tokenizer()
    patch = 8
    images = CLIPImageProcessorPil(size={"shortest_edge": TILE}, crop_size={"height": TILE, "width": TILE})
    proc = tf.LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=patch,
                             vision_feature_select_strategy="default", num_additional_image_tokens=1,
                             chat_template=LLAVA_TEMPLATE, image_token="<image>")
    cfg = tf.LlavaConfig(
        vision_config=tf.CLIPVisionConfig(**VISION, image_size=TILE, patch_size=patch, projection_dim=32),
        text_config=tf.LlamaConfig(**TEXT, **_ids(tok)), image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=(TILE // patch) ** 2, vision_feature_layer=-2, vision_feature_select_strategy="default",
        tie_word_embeddings=False)
    return tf.LlavaForConditionalGeneration(cfg), proc, {}


def _build_llava_next() -> tuple[Any, Any, dict[str, Any]]:
    import transformers as tf
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    tok = _llama_tokenizer()
    patch = 8
    pinpoints = [[TILE, 2 * TILE], [2 * TILE, TILE], [2 * TILE, 2 * TILE]]
    images = LlavaNextImageProcessorPil(size={"shortest_edge": TILE}, crop_size={"height": TILE, "width": TILE},
                                        image_grid_pinpoints=pinpoints)
    proc = tf.LlavaNextProcessor(image_processor=images, tokenizer=tok, patch_size=patch,
                                 vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                 chat_template=LLAVA_NEXT_TEMPLATE, image_token="<image>")
    cfg = tf.LlavaNextConfig(
        vision_config=tf.CLIPVisionConfig(**VISION, image_size=TILE, patch_size=patch, projection_dim=32),
        text_config=tf.MistralConfig(**TEXT, **_ids(tok), sliding_window=None),
        image_token_index=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=pinpoints,
        image_seq_length=(TILE // patch) ** 2, vision_feature_layer=-2, vision_feature_select_strategy="default",
        tie_word_embeddings=False)
    return tf.LlavaNextForConditionalGeneration(cfg), proc, {}


def _build_idefics3(smol: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    """Idefics3 (``smol``: SmolVLM, the same image path with SmolVLM's processor, which needs the ``num2words``
    package, and its ``<|im_start|>`` template): 32-px tiles of 4-px patches, pixel shuffle x2 (16 tokens a tile)
    and a global view; Llama text."""
    import transformers as tf

    from corl_bench.models.hf_vlm import without_video

    grid = tuple(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))
    head = ("<|im_start|>", "<|im_end|>") if smol else ("<|begin_of_text|>", "<|end_of_text|>")
    tok = _tokenizer(head, ("<|reserved_special_token_0|>", "<fake_token_around_image>", "<image>",
                            "<end_of_utterance>", "<global-img>", *grid),
                     bos=head[0], eos="<end_of_utterance>" if smol else head[1], pad="<|reserved_special_token_0|>",
                     add_bos=not smol)
    patch, scale = 4, 2
    seq = (TILE // patch) ** 2 // scale ** 2
    if smol:
        from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil as Images
    else:
        from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil as Images
    images = Images(size={"longest_edge": 2 * TILE}, max_image_size={"longest_edge": TILE}, do_image_splitting=True)
    if smol:
        proc = without_video(tf.SmolVLMProcessor)(image_processor=images, tokenizer=tok, video_processor=None,
                                                  image_seq_len=seq, chat_template=SMOLVLM_TEMPLATE)
    else:
        proc = tf.Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=seq,
                                    chat_template=IDEFICS3_TEMPLATE)
    ids = _ids(tok)
    config, vision, model = ((tf.SmolVLMConfig, tf.SmolVLMVisionConfig, tf.SmolVLMForConditionalGeneration) if smol
                             else (tf.Idefics3Config, tf.Idefics3VisionConfig, tf.Idefics3ForConditionalGeneration))
    cfg = config(vision_config=vision(**VISION, image_size=TILE, patch_size=patch),
                 text_config=tf.LlamaConfig(**TEXT, **ids), scale_factor=scale,
                 image_token_id=tok.convert_tokens_to_ids("<image>"), tie_word_embeddings=False,
                 pad_token_id=ids["pad_token_id"])
    eos = [tok.convert_tokens_to_ids("<end_of_utterance>"), tok.eos_token_id]
    return model(cfg), proc, {} if smol else {"eos_token_id": eos}


def _build_gemma3() -> tuple[Any, Any, dict[str, Any]]:
    import torch
    import transformers as tf
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    named = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    tok = _tokenizer(("<pad>", "<eos>", "<bos>", "<unk>"),
                     ("<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"),
                     bos="<bos>", eos="<eos>", pad="<pad>", unk="<unk>", add_bos=True, named=named)
    patch, per_image = 4, 16
    images = Gemma3ImageProcessorPil(size={"height": TILE, "width": TILE}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    proc = tf.Gemma3Processor(image_processor=images, tokenizer=tok, chat_template=GEMMA3_TEMPLATE,
                              image_seq_length=per_image)
    head_dim = TEXT["hidden_size"] // TEXT["num_attention_heads"]
    text = tf.Gemma3TextConfig(**TEXT, **_ids(tok), head_dim=head_dim, query_pre_attn_scalar=head_dim,
                               sliding_window=128, layer_types=["sliding_attention", "full_attention"])
    cfg = tf.Gemma3Config(
        text_config=text, vision_config=tf.SiglipVisionConfig(**VISION, image_size=TILE, patch_size=patch),
        mm_tokens_per_image=per_image, boi_token_index=tok.convert_tokens_to_ids("<start_of_image>"),
        eoi_token_index=tok.convert_tokens_to_ids("<end_of_image>"),
        image_token_index=tok.convert_tokens_to_ids("<image_soft_token>"), tie_word_embeddings=True)
    eos = [tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>")]
    model = tf.Gemma3ForConditionalGeneration(cfg)
    # transformers initialises the projector's matrix to zeros (a trained checkpoint's is not): with it no gradient
    # would reach the vision tower, which is what the tests of a real VLM's training step look at
    torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight, std=0.02)
    return model, proc, {"eos_token_id": eos}


QWEN_TAIL = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


def _qwen_tokenizer(named: dict[str, str] | None = None, tail: Sequence[str] = QWEN_TAIL) -> Any:
    """Qwen2's tokenizer: ``<|endoftext|>`` (pad) first, no ``<bos>``, the chat and vision markers after the bytes."""
    return _tokenizer(("<|endoftext|>",), tail, bos=None, eos="<|im_end|>", pad="<|endoftext|>", named=named)


def _qwen_vl(version: str) -> tuple[Any, Any, dict[str, Any]]:
    """Qwen2-VL (``"2"``) or Qwen2.5-VL (``"2.5"``): 4-px patches, 2x2 merge, 2-frame temporal patches; an image of
    up to 32x32 px (min 16x16) becomes (h/8)(w/8) tokens between ``<|vision_start|>`` and ``<|vision_end|>``."""
    import transformers as tf
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from corl_bench.models.hf_vlm import without_video

    tok = _qwen_tokenizer()
    patch, merge = 4, 2
    images = Qwen2VLImageProcessorPil(patch_size=patch, temporal_patch_size=2, merge_size=merge,
                                      size={"shortest_edge": 16 * 16, "longest_edge": TILE * TILE})
    proc_cls = tf.Qwen2VLProcessor if version == "2" else tf.Qwen2_5_VLProcessor
    proc = without_video(proc_cls)(image_processor=images, tokenizer=tok, chat_template=QWEN2_VL_TEMPLATE)
    ids = _ids(tok)
    head_dim = TEXT["hidden_size"] // TEXT["num_attention_heads"]
    quarter = head_dim // 2 // 4
    rope = {"rope_type": "default", "mrope_section": [head_dim // 2 - 2 * quarter, quarter, quarter]}
    text = {**TEXT, **ids, "rope_parameters": rope}
    tid = tok.convert_tokens_to_ids
    common = dict(image_token_id=tid("<|image_pad|>"), video_token_id=tid("<|video_pad|>"),
                  vision_start_token_id=tid("<|vision_start|>"), vision_end_token_id=tid("<|vision_end|>"),
                  tie_word_embeddings=True)
    if version == "2":
        vision = dict(depth=2, embed_dim=VISION["hidden_size"], hidden_size=TEXT["hidden_size"], mlp_ratio=2,
                      num_heads=VISION["num_attention_heads"], patch_size=patch, spatial_merge_size=merge,
                      temporal_patch_size=2)
        cfg = tf.Qwen2VLConfig(text_config=text, vision_config=vision, **common)
        return tf.Qwen2VLForConditionalGeneration(cfg), proc, {}
    vision = dict(depth=2, hidden_size=VISION["hidden_size"], intermediate_size=VISION["intermediate_size"],
                  num_heads=VISION["num_attention_heads"], patch_size=patch, spatial_merge_size=merge,
                  temporal_patch_size=2, out_hidden_size=TEXT["hidden_size"], window_size=16,
                  fullatt_block_indexes=[1])
    cfg = tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **common)
    return tf.Qwen2_5_VLForConditionalGeneration(cfg), proc, {}


def _build_internvl() -> tuple[Any, Any, dict[str, Any]]:
    """InternVL (HF): 32-px tiles (up to 4 and a thumbnail), 4-px patches, pixel shuffle 0.5: 16 tokens a tile
    between ``<img>`` and ``</img>``; Qwen2 text."""
    import transformers as tf
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil

    from corl_bench.models.hf_vlm import without_video

    named = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
             "video_token": "<video>"}
    tok = _qwen_tokenizer(named, ("<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"))
    patch, per_tile = 4, 16
    images = GotOcr2ImageProcessorPil(size={"height": TILE, "width": TILE}, crop_to_patches=True, min_patches=1,
                                      max_patches=4)
    proc = without_video(tf.InternVLProcessor)(image_processor=images, tokenizer=tok, image_seq_length=per_tile,
                                               chat_template=INTERNVL_TEMPLATE)
    vision = tf.InternVLVisionConfig(**VISION, image_size=TILE, patch_size=patch)
    cfg = tf.InternVLConfig(vision_config=vision, text_config=tf.Qwen2Config(**TEXT, **_ids(tok)),
                            image_token_id=tok.convert_tokens_to_ids("<IMG_CONTEXT>"), image_seq_length=per_tile,
                            downsample_ratio=0.5, tie_word_embeddings=False)
    return tf.InternVLForConditionalGeneration(cfg), proc, {}


def _build_llava_onevision() -> tuple[Any, Any, dict[str, Any]]:
    """LLaVA-OneVision: a SigLIP tower (32 px, 8-px patches, every patch a token), any-res tiles of 32 px (pinpoints
    32x64, 64x32, 64x64) and a base view, ``anyres_max_9``; Qwen2 text; the Qwen chat template with ``<image>``."""
    import transformers as tf
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    from corl_bench.models.hf_vlm import without_video

    tok = _qwen_tokenizer(tail=("<|im_start|>", "<|im_end|>", "<image>", "<video>"))
    patch = 8
    pinpoints = [[TILE, 2 * TILE], [2 * TILE, TILE], [2 * TILE, 2 * TILE]]
    images = LlavaOnevisionImageProcessorPil(size={"height": TILE, "width": TILE}, image_grid_pinpoints=pinpoints)
    proc = without_video(tf.LlavaOnevisionProcessor)(
        image_processor=images, tokenizer=tok, num_image_tokens=(TILE // patch) ** 2,
        vision_feature_select_strategy="full", chat_template=LLAVA_ONEVISION_TEMPLATE, image_token="<image>",
        video_token="<video>")
    tid = tok.convert_tokens_to_ids
    cfg = tf.LlavaOnevisionConfig(
        vision_config=tf.SiglipVisionConfig(**VISION, image_size=TILE, patch_size=patch),
        text_config=tf.Qwen2Config(**TEXT, **_ids(tok)), image_token_index=tid("<image>"),
        video_token_index=tid("<video>"), image_grid_pinpoints=pinpoints, vision_feature_select_strategy="full",
        vision_feature_layer=-1, tie_word_embeddings=False)
    return tf.LlavaOnevisionForConditionalGeneration(cfg), proc, {}


ARCHS: dict[str, TinyArch] = {
    "qwen2-vl": TinyArch("qwen2-vl", "Qwen/Qwen2-VL-2B-Instruct", "Qwen2VLForConditionalGeneration",
                         "Qwen2VLProcessor", "Qwen2VLImageProcessorPil", "<|image_pad|>"),
    "qwen2.5-vl": TinyArch("qwen2.5-vl", "Qwen/Qwen2.5-VL-3B-Instruct", "Qwen2_5_VLForConditionalGeneration",
                           "Qwen2_5_VLProcessor", "Qwen2VLImageProcessorPil", "<|image_pad|>"),
    "internvl": TinyArch("internvl", "OpenGVLab/InternVL3_5-2B-HF", "InternVLForConditionalGeneration",
                         "InternVLProcessor", "GotOcr2ImageProcessorPil", "<IMG_CONTEXT>"),
    "llava-onevision": TinyArch("llava-onevision", "llava-hf/llava-onevision-qwen2-0.5b-ov-hf",
                                "LlavaOnevisionForConditionalGeneration", "LlavaOnevisionProcessor",
                                "LlavaOnevisionImageProcessorPil", "<image>"),
    "llava": TinyArch("llava", "llava-hf/llava-1.5-7b-hf", "LlavaForConditionalGeneration", "LlavaProcessor",
                      "CLIPImageProcessorPil", "<image>"),
    "llava-next": TinyArch("llava-next", "llava-hf/llava-v1.6-mistral-7b-hf", "LlavaNextForConditionalGeneration",
                           "LlavaNextProcessor", "LlavaNextImageProcessorPil", "<image>"),
    "idefics3": TinyArch("idefics3", "HuggingFaceM4/Idefics3-8B-Llama3", "Idefics3ForConditionalGeneration",
                         "Idefics3Processor", "Idefics3ImageProcessorPil", "<image>"),
    "smolvlm": TinyArch("smolvlm", "HuggingFaceTB/SmolVLM-256M-Instruct", "SmolVLMForConditionalGeneration",
                        "SmolVLMProcessor", "SmolVLMImageProcessorPil", "<image>"),
    "gemma3": TinyArch("gemma3", "google/gemma-3-4b-it", "Gemma3ForConditionalGeneration", "Gemma3Processor",
                       "Gemma3ImageProcessorPil", "<image_soft_token>"),
}
"""the architectures :func:`build` makes (module table)"""

_BUILDERS: dict[str, Callable[[], tuple[Any, Any, dict[str, Any]]]] = {
    "qwen2-vl": lambda: _qwen_vl("2"), "qwen2.5-vl": lambda: _qwen_vl("2.5"), "internvl": _build_internvl,
    "llava-onevision": _build_llava_onevision, "smolvlm": lambda: _build_idefics3(smol=True),
    "llava": _build_llava, "llava-next": _build_llava_next, "idefics3": _build_idefics3, "gemma3": _build_gemma3}

_VIDEO = ("its processor class takes a video processor, and transformers has video processors for the torchvision "
          "backend only: AutoProcessor.from_pretrained(path, backend='pil') cannot load it (see the module docstring)")
UNAVAILABLE: dict[str, str] = {}
"""architectures asked for that cannot be built here, with the reason"""


def build(arch: str, path: str | Path, seed: int = 0) -> Path:
    """Build the tiny checkpoint ``arch`` (a key of :data:`ARCHS`) into folder ``path``; returns the folder.

    The same ``seed`` gives the same weights (byte-identical ``model.safetensors``); the global torch RNG is left
    as it was. An arch of :data:`UNAVAILABLE` or an unknown one is a ValueError naming the reason / the choices."""
    if arch in UNAVAILABLE:
        raise ValueError(f"tiny VLM {arch!r} cannot be built here: {UNAVAILABLE[arch]}")
    if arch not in _BUILDERS:
        raise ValueError(f"unknown tiny VLM {arch!r}; choose one of {', '.join(ARCHS)}")
    import torch
    from transformers import GenerationConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, processor, generation = _BUILDERS[arch]()
    tok = processor.tokenizer
    model = model.to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
        **{"eos_token_id": tok.eos_token_id, **generation})
    model.save_pretrained(path)
    processor.save_pretrained(path)
    log.info("built tiny %s (%s, %d parameters) in %s", arch, ARCHS[arch].model_class,
             sum(p.numel() for p in model.parameters()), path)
    return path


def noise_image(width: int, height: int, seed: int) -> Any:
    """A ``width`` x ``height`` RGB image of uniform noise from ``seed`` (PIL): test and demo input for the models."""
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")
