"""The report says how its figures were measured: KLD method per variant, speed probe, unpacked weights."""
from evalsuite.report.html import render_html
from tests.report.test_report_render import crafted_report


def test_kld_method_per_variant_and_measurement_notes():
    r = crafted_report()
    r["kld_method"] = {"run": "teacher-forced <in-process>", "rows": {"q4_gguf": {"served-tf-topk": 7, "": 1},
                                                                       "w8": {"": 30}}}
    for v in r["variants"]:
        v["speed_probe"] = {"rows": 4, "prompt_tokens": 64, "new_tokens": 16}
    r["variants"][2]["kernels"] = "dequantized"
    page = render_html(r)
    assert "KLD method: teacher-forced &lt;in-process&gt;" in page
    assert "<li>q4_gguf: as above (1 rows), served-tf-topk (7 rows)</li>" in page
    assert "<li>w8:" not in page  # rows without a method of their own say nothing more
    assert "the same 4 prompts of 64 tokens in one batch, 16 greedy tokens each" in page
    assert "w4g128: quantized weights ran unpacked" in page


def test_without_probe_the_speed_note_says_medians():
    page = render_html(crafted_report())
    assert "medians over the quality run" in page and 'id="kld-method"' not in page
