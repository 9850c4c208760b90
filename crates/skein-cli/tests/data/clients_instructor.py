"""Drive skein's recording proxy with instructor in its Responses tools
mode: an extraction whose first reply fails validation, so instructor
retries with the validation error (dropping the bad reply), then a
follow-up extraction on the history so far, streamed (`create_partial`).
Runs in the instructor venv (`$SKEIN_TEST_VENV/instructor`). Prints what
came back as JSON."""

import json
import sys

import instructor
from openai import OpenAI
from pydantic import BaseModel


class Weather(BaseModel):
    city: str
    temperature_c: int


client = instructor.from_openai(
    OpenAI(base_url=sys.argv[1], api_key="sk-unused", max_retries=0), mode=instructor.Mode.RESPONSES_TOOLS
)
out = {}
messages = [{"role": "user", "content": "Paris: sunny, 21 degrees. Extract the weather."}]
weather = client.create(model="gpt-test", response_model=Weather, messages=messages, max_retries=2)
out["first"] = weather.model_dump()
messages += [
    {"role": "assistant", "content": weather.model_dump_json()},
    {"role": "user", "content": "Lyon: cloudy, 15 degrees. Extract the weather."},
]
partials = client.create_partial(model="gpt-test", response_model=Weather, messages=messages)
out["streamed"] = [partial.model_dump() for partial in partials][-1]
print(json.dumps(out))
