"""yggc: latency-optimal tree speculative decoding on a static-graph runtime."""
from setuptools import setup

setup(
    name="yggc",
    version="0.1.0",
    description="Compiler-centric static-graph runtime for latency-optimal tree speculative decoding",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # graphs/ and passes/ live at the top of the repo but install under the yggc namespace only.
    packages=["yggc", "yggc.tree", "yggc.plan", "yggc.bundle", "yggc.artifacts", "yggc.runtime", "yggc.runtime.drafters", "yggc.bench", "yggc.cli",
              "yggc.serve", "yggc.train", "yggc.graphs", "yggc.passes", "yggc.passes.kernels"],
    package_dir={"yggc": "yggc", "yggc.graphs": "graphs", "yggc.passes": "passes"},
    package_data={"yggc": ["demo_pair/*.json", "demo_pair/*.txt", "demo_pair/*/*.json", "demo_pair/*/*.safetensors",
                           "smollm2_drafter/*.json", "smollm2_drafter/*.txt", "smollm2_drafter/*.safetensors",
                           "smollm2_eagle3/*.json", "smollm2_eagle3/*.safetensors", "artifacts/kernels/*.cpp"]},
    install_requires=[
        "torch>=2.11,<2.14",  # 2.11 on the GPU machine; CI installs the 2.13.0 CPU wheel first
        "numpy>=1.24",
        "networkx>=3.0",
        "safetensors>=0.4",
        "tokenizers>=0.15",
        "tqdm>=4.60",
        "gguf>=0.10",  # llama.cpp's own GGUF reader and dequantizer (yggc import, -m MODEL.gguf)
        "jinja2>=3.1",  # chat templates
    ],
    extras_require={
        "dev": ["pytest>=7", "pytest-xdist>=3.8", "transformers>=4.45", "scipy>=1.10", "ruff>=0.4", "matplotlib>=3.5",
                "fastapi>=0.110", "pydantic-core>=2.14", "uvicorn>=0.29", "openai>=1.40", "httpx>=0.27",
                "llguidance>=1.0"],
        # yggc serve: the OpenAI-compatible HTTP server; pydantic-core parses request JSON with a nesting limit;
        # llguidance follows response_format and grammar
        "serve": ["fastapi>=0.110", "pydantic-core>=2.14", "uvicorn>=0.29", "llguidance>=1.0"],
        "grammar": ["llguidance>=1.0"],  # structured output: --json-schema, --grammar, Runtime(grammar=...)
        "plot": ["matplotlib>=3.5"],
        "hf": ["transformers>=4.45"],
        "train": ["transformers>=4.45"],  # yggc train: transformers builds, trains and exports the models
        # yggc bench --rows openvino,openvino-spec; the IR exporter (optimum-intel) is installed apart: see README
        "openvino": ["openvino-genai>=2026.0"],
        # yggc bench --rows llama.cpp,llama.cpp-gguf; builds llama.cpp from source (minutes), so never in dev or CI
        "llama-cpp": ["llama-cpp-python>=0.3"],
        "cuda": ["cuda-python>=12"],
        "tensorrt": ["torch-tensorrt>=2.5"],
    },
    entry_points={"console_scripts": ["yggc=yggc.cli:main"]},
)
