"""Print the benchmark indices of ARGV[1] (comma list) that no rows.jsonl under /tmp/ebw holds yet."""
import json, pathlib, sys
KEYS = """01_DiagMatmul 02_Softmax 03_LayerNorm 04_GELU_Tanh 05_MinReduction 08_RMSNorm 09_Swish 02_Gemm_Divide_Sum_Scale
03_Scale_Softmax_Log 06_Conv2d_Scale_Bias_ReLU 08_Elementwise_Chain 01_MLPBlock 06_UpperTriangularMatmul
07_PairwiseSqDistance 10_LogSumExp 11_ELU 12_HuberLoss 13_Hardsigmoid 01_Gemm_Scale_ResidualAdd
04_TwoLinear_NoActivation 07_Conv2d_GlobalAvgPool 09_Transpose_Scale_Tanh_Transpose 10_Gemm_Softmax_Argmax
11_ParallelLinear_Sum 12_MatmulChain_Vector 13_Linear_MeanPool_GELU 02_SmallCNN 03_LSTM 04_GRU 05_AttentionBlock
06_TransformerBlock 07_MoE_Top1 04_GRU@batch_size16_seq_len512_hidden_size256
03_LSTM@batch_size16_seq_len512_hidden_size256 06_TransformerBlock@batch_size2_seq_len1024""".split()
done = set()
for f in pathlib.Path("/tmp/ebw").glob("*/rows.jsonl"):
    for line in f.read_text().splitlines():
        if line.strip():
            done.add(json.loads(line)["task"].split("/", 2)[-1])
print(",".join(i for i in sys.argv[1].split(",") if KEYS[int(i)] not in done))
