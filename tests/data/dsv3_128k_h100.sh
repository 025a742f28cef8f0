#!/bin/bash
# DeepSeek-V3 at 128K on 32 x 8 H100
export CUDA_DEVICE_MAX_CONNECTIONS=1
NODES=32
torchrun --nproc-per-node 8 --nnodes ${NODES} pretrain_gpt.py \
    --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 \
    --multi-latent-attention --kv-lora-rank 512 --q-lora-rank 1536 \
    --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --position-embedding-type rope \
    --num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 \
    --moe-shared-expert-intermediate-size 2048 --moe-layer-freq "([0]*3+[1]*58)" --mtp-num-layers 1 \
    --tensor-model-parallel-size 1 --context-parallel-size 32 --pipeline-model-parallel-size 8 \
    --expert-model-parallel-size 32 --pipeline-model-parallel-layout 'Et|(tt|)*30mL' \
    --seq-length 131072 --max-position-embeddings 163840 --micro-batch-size 1 --global-batch-size 256 \
    --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep --moe-grouped-gemm \
    --bf16 --fp8-format e4m3 --fp8-recipe blockwise \
    --recompute-granularity selective --recompute-modules mla_up_proj layernorm moe mlp \
    --use-distributed-optimizer --use-precision-aware-optimizer --optimizer-cpu-offload \
    --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 4 \
    --lr 1.0e-4 --data-path /data/tokens   # data and optimizer flags are not modelled
