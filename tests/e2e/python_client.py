"""A ced.v1.Gateway client on a second gRPC stack (Python grpcio) for the
end-to-end tests.

Usage: python3 python_client.py GATEWAY GENERATED_DIR MAX_TOKENS REPLAY_ON ID,ID,...
GENERATED_DIR holds ced/v1/gateway_pb2.py made by `protoc --python_out`.
Prints one "key value" line per result; exits non-zero on any failure.
Health and server reflection use hand-encoded messages (their Python
packages are not needed).
"""
import sys

import grpc
from google.protobuf import descriptor_pb2


def fields(data):
    """Yields (field number, wire type, value) of a serialized message."""
    i = 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, wire, varint()
        elif wire == 2:
            n = varint()
            yield number, wire, data[i:i + n]
            i += n
        elif wire == 1:
            yield number, wire, data[i:i + 8]
            i += 8
        elif wire == 5:
            yield number, wire, data[i:i + 4]
            i += 4
        else:
            raise ValueError("unsupported wire type %d" % wire)


def length_delimited(number, payload):
    assert len(payload) < 128
    return bytes([(number << 3) | 2, len(payload)]) + payload


def reflection(channel):
    """Lists the services, then fetches the file that defines ced.v1.Gateway."""
    info = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    # ServerReflectionRequest: list_services = 7, file_containing_symbol = 4.
    requests = [length_delimited(7, b"*"), length_delimited(4, b"ced.v1.Gateway")]
    responses = list(info(iter(requests), timeout=10))
    for number, _, value in fields(responses[0]):
        if number == 6:  # ListServiceResponse { repeated ServiceResponse service = 1 }
            for _, _, service in fields(value):
                for n, _, name in fields(service):
                    if n == 1:
                        print("service", name.decode(), flush=True)
    for number, _, value in fields(responses[1]):
        if number == 4:  # FileDescriptorResponse { repeated bytes file_descriptor_proto = 1 }
            for _, _, blob in fields(value):
                proto = descriptor_pb2.FileDescriptorProto.FromString(blob)
                for service in proto.service:
                    for method in service.method:
                        print("method %s.%s.%s server_streaming=%s" %
                              (proto.package, service.name, method.name,
                               method.server_streaming), flush=True)


def main():
    address, generated = sys.argv[1], sys.argv[2]
    max_tokens, replay_on = int(sys.argv[3]), sys.argv[4]
    prompt = [int(t) for t in sys.argv[5].split(",")]
    sys.path.insert(0, generated)
    from ced.v1 import gateway_pb2  # noqa: E402 (generated at test time)

    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=10)

    # HealthCheckRequest{service: "ced.v1.Gateway"}; {status: SERVING} is 08 01.
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    print("health", check(length_delimited(1, b"ced.v1.Gateway"), timeout=10).hex(), flush=True)

    reflection(channel)

    generate = channel.unary_stream(
        "/ced.v1.Gateway/Generate",
        request_serializer=gateway_pb2.GenerateRequest.SerializeToString,
        response_deserializer=gateway_pb2.GenerateResponse.FromString)
    request = gateway_pb2.GenerateRequest(
        prompt_token_ids=prompt, max_tokens=max_tokens, ignore_eos=True,
        request_id="python-1", replay_on=gateway_pb2.ReplayOn.Value(replay_on))
    tokens, last = [], None
    for response in generate(request, timeout=60):
        tokens.extend(response.token_ids)
        last = response
    print("tokens", ",".join(str(t) for t in tokens), flush=True)
    print("finish", gateway_pb2.FinishReason.Name(last.finish_reason), flush=True)
    print("request_id", last.request_id, flush=True)
    print("placement", gateway_pb2.ReplayOn.Name(last.placement.replay_on),
          last.placement.prefill_worker_id, last.placement.decode_worker_id, flush=True)


if __name__ == "__main__":
    main()
