"""A ced.v1.Gateway client on a second gRPC stack (Python grpcio).

Usage: python3 python_client.py GATEWAY_ADDRESS GENERATED_DIR
GENERATED_DIR holds ced/v1/gateway_pb2.py made by `protoc --python_out`.
Prints one "key value" line per result; exits non-zero on any failure.
"""
import sys

import grpc


def main():
    address, generated = sys.argv[1], sys.argv[2]
    sys.path.insert(0, generated)
    from ced.v1 import gateway_pb2  # noqa: E402 (generated at test time)

    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=10)

    # grpc.health.v1.Health/Check with hand-encoded messages: the empty
    # request, and {status: SERVING} is b"\x08\x01".
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    print("health", check(b"", timeout=10).hex(), flush=True)

    tokenize = channel.unary_unary(
        "/ced.v1.Gateway/Tokenize",
        request_serializer=gateway_pb2.TokenizeRequest.SerializeToString,
        response_deserializer=gateway_pb2.TokenizeResponse.FromString)
    reply = tokenize(gateway_pb2.TokenizeRequest(text="hi", add_bos=True), timeout=10)
    print("tokenize", ",".join(str(t) for t in reply.token_ids), flush=True)

    generate = channel.unary_stream(
        "/ced.v1.Gateway/Generate",
        request_serializer=gateway_pb2.GenerateRequest.SerializeToString,
        response_deserializer=gateway_pb2.GenerateResponse.FromString)
    request = gateway_pb2.GenerateRequest(prompt="hi", max_tokens=5, request_id="py-1",
                                          replay_on=gateway_pb2.REPLAY_ON_PREFILL)
    tokens, text, finish = [], "", None
    for response in generate(request, timeout=30):
        tokens.extend(response.token_ids)
        text += response.text
        if response.finish_reason:
            finish = gateway_pb2.FinishReason.Name(response.finish_reason)
    print("tokens", ",".join(str(t) for t in tokens), flush=True)
    print("text", text, flush=True)
    print("finish", finish, flush=True)

    try:
        list(generate(gateway_pb2.GenerateRequest(prompt="hi", max_tokens=5, top_k=-1), timeout=10))
        print("bad-request accepted", flush=True)
    except grpc.RpcError as error:
        print("bad-request", error.code().name, error.details(), flush=True)


if __name__ == "__main__":
    main()
